/* The cJSON alternative to tokenize_text's JSONL reader, for dev/bench/bench_jsonl_reader.sh
 * only: that script #includes this file into a copy of data/tokenize_text.c and calls
 * json_line_cjson where the copy called json_line, so the two builds differ in nothing but
 * how a line is parsed. The same document goes into the same batch (the script checks that
 * both write the same shards). Not a drop-in reader: cJSON reports only where it stopped,
 * not why, stops a document at a \u0000, refuses Python's NaN/Infinity and lone surrogates,
 * and takes the first of two equal keys where Python takes the last. */
static void json_line_cjson(Json* j) {
    cJSON* o = cJSON_ParseWithLength((const char*)j->s, (size_t)(j->end - j->s));
    if (!o) die("%s: line %lld, column %zu: malformed JSON", j->path, j->line, (size_t)((const unsigned char*)cJSON_GetErrorPtr() - j->s) + 1);
    if (!cJSON_IsObject(o)) die("%s: line %lld: not a JSON object", j->path, j->line);
    const cJSON* v = cJSON_GetObjectItemCaseSensitive(o, j->f->field);
    if (!v) die("%s: line %lld: no \"%s\" field", j->path, j->line, j->f->field);
    if (!cJSON_IsString(v)) die("%s: line %lld: field \"%s\" is not a string", j->path, j->line, j->f->field);
    Docs* d = j->d;
    Batch* b = d->b;
    b->len = d->piece_off;
    if (!d->skipping) {
        size_t n = strlen(v->valuestring);
        batch_reserve(b, n);
        memcpy(b->text + b->len, v->valuestring, n);
        b->len += n;
    }
    cJSON_Delete(o);
}
