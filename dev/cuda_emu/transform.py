#!/usr/bin/env python3
"""Source transformer of the CPU emulator (see emu.h): writes host-C++ copies of CUDA sources.

usage: transform.py OUTDIR FILE... [--skip-call NAME[=WHY]]...

Each FILE (a path relative to the current directory) is written to OUTDIR/FILE with
  name<<<grid, block[, smem[, stream]]>>>(args)
      -> emu::launch("name", (const void*)(name), dim3(grid), dim3(block), smem, stream, BOUNDS,
                     [emu_args = emu::launch_args(args)]() mutable {
                         std::apply([](auto&... emu_a) { name(emu_a...); }, emu_args); })
         BOUNDS: the kernel's __launch_bounds__; the address only when smem is not 0 (it
         identifies cudaFuncSetAttribute's opt-in); the arguments' values are captured at the
         launch (the kernel runs when its stream gets to it); NULL in them becomes nullptr
  asm [volatile] ("ptx" : "=r"(x), "+f"(y) : "r"(z))
      -> emu::ptx("ptx", {emu::asm_out(x), emu::asm_out(y), emu::asm_in(z)})
  extern __shared__ [__align__(n)] T name[];  -> T* const name = (T*)emu::dynamic_smem();
  __shared__ T a[..], b[..];                  -> static T a[..], b[..]; emu::shared_var(a, sizeof a); ...
  NAME(...);   (a statement calling a --skip-call NAME)
      -> printf("ok - NAME(...) # skip WHY\\n");
Comments and string literals are never rewritten. Anything the emulator cannot
handle is left alone and fails to compile.
"""
import os
import re
import sys


def blank_comments_and_strings(src):
    """src with comments and the contents of string/char literals replaced by spaces."""
    out, i, n = list(src), 0, len(src)

    def blank(a, b):
        for k in range(a, b):
            if out[k] != '\n':
                out[k] = ' '

    while i < n:
        if src.startswith('//', i):
            j = src.find('\n', i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif src.startswith('/*', i):
            j = src.find('*/', i + 2) + 2
            blank(i, j)
            i = j
        elif src[i] in '"\'':
            q, j = src[i], i + 1
            while src[j] != q:
                j += 2 if src[j] == '\\' else 1
            blank(i + 1, j)
            i = j + 1
        else:
            i += 1
    return ''.join(out)


def match_close(s, i, open_ch, close_ch):
    """Index of the bracket closing the one at s[i]."""
    depth = 0
    for j in range(i, len(s)):
        if s[j] == open_ch:
            depth += 1
        elif s[j] == close_ch:
            depth -= 1
            if depth == 0:
                return j
    raise SystemExit('transform.py: unbalanced %s at offset %d' % (open_ch, i))


def split_top(s, masked, sep=','):
    """Split s at sep outside (), [], {} (judged on the masked copy)."""
    parts, depth, start = [], 0, 0
    for i in range(len(s)):
        c = masked[i]
        if c in '([{':
            depth += 1
        elif c in ')]}':
            depth -= 1
        elif c == sep and depth == 0:  # asm sections: "::" at depth 0 is two separators
            parts.append(s[start:i])
            start = i + 1
    parts.append(s[start:])
    return parts


class Source:
    """Text plus its masked copy; edits are collected and applied back to front."""

    def __init__(self, text):
        self.text, self.masked, self.edits = text, blank_comments_and_strings(text), []

    def apply(self):
        t = self.text
        for a, b, new in sorted(self.edits, reverse=True):
            t = t[:a] + new + t[b:]
        return t


def launch_bounds(masked):
    """kernel name -> its __launch_bounds__ expression."""
    return {m.group(2): m.group(1).strip()
            for m in re.finditer(r'__launch_bounds__\s*\(([^()]*(?:\([^()]*\)[^()]*)*)\)\s*(\w+)\s*\(', masked)}


def rewrite_launches(s, bounds):
    t, m = s.text, s.masked
    for hit in re.finditer(r'<<<', m):
        j = hit.start()
        k = j  # back over template arguments, then the name
        if m[k - 1] == '>':
            depth = 0
            while True:
                k -= 1
                depth += {'>': 1, '<': -1}.get(m[k], 0)
                if depth == 0:
                    break
        while k > 0 and (m[k - 1].isalnum() or m[k - 1] in '_:'):
            k -= 1
        name = t[k:j].strip()
        e = m.index('>>>', j)
        cfg = [c.strip() for c in split_top(t[j + 3:e], m[j + 3:e])]
        cfg += ['0', '0'][len(cfg) - 2:]
        a = e + 3
        while m[a].isspace():
            a += 1
        b = match_close(m, a, '(', ')')
        base = re.sub(r'<.*', '', name).split('::')[-1]
        bound = bounds.get(base, '0')
        # The kernel's address identifies its cudaFuncSetAttribute opt-in, needed only with
        # dynamic shared memory (without, the name may be a template to deduce from the args).
        addr = 'NULL' if cfg[2] == '0' else '(const void*)(%s)' % name
        # The kernel runs later (when its stream gets to it) but with the arguments' values at
        # the launch: they are evaluated into a tuple now (emu::launch_args takes the argument
        # list as written, so commas inside templates or parentheses need no parsing here) and
        # the kernel is called with its elements. NULL becomes nullptr: a tuple element of
        # NULL's integer type would not convert to the pointer parameter.
        args = t[a + 1:b]
        for nm in reversed(list(re.finditer(r'\bNULL\b', m[a + 1:b]))):  # (not in comments or strings)
            args = args[:nm.start()] + 'nullptr' + args[nm.end():]
        s.edits.append((k, b + 1, 'emu::launch("%s", %s, dim3(%s), dim3(%s), (size_t)(%s), '
                        '(cudaStream_t)(%s), (unsigned)(%s), [emu_args = emu::launch_args(%s)]() mutable { '
                        'std::apply([](auto&... emu_a) { %s(emu_a...); }, emu_args); })'
                        % (name, addr, cfg[0], cfg[1], cfg[2], cfg[3], bound, args, name)))


def rewrite_asm(s):
    t, m = s.text, s.masked
    for hit in re.finditer(r'\b(?:asm|__asm__)\b(\s*(?:volatile|__volatile__))?\s*\(', m):
        a = hit.end() - 1
        b = match_close(m, a, '(', ')')
        sections = split_top(t[a + 1:b], m[a + 1:b], ':')
        msec = split_top(m[a + 1:b], m[a + 1:b], ':')
        args = []
        for k in (1, 2):
            if k >= len(sections) or not msec[k].strip():
                continue
            for op, mop in zip(split_top(sections[k], msec[k]), split_top(msec[k], msec[k])):
                cm = re.match(r'\s*("[^"]*")\s*\((.*)\)\s*$', op, re.S)
                if not cm:
                    raise SystemExit('transform.py: cannot parse asm operand %r' % op)
                out = '=' in cm.group(1) or '+' in cm.group(1)
                args.append('emu::asm_%s(%s)' % ('out' if out else 'in', cm.group(2).strip()))
        s.edits.append((hit.start(), b + 1, 'emu::ptx(%s, {%s})' % (sections[0].strip(), ', '.join(args))))


def rewrite_shared(s):
    t, m = s.text, s.masked
    for hit in re.finditer(r'\b(extern\s+)?__shared__\b', m):
        end = m.index(';', hit.end())
        decl = re.sub(r'__align__\s*\(\s*\d+\s*\)', '', t[hit.end():end]).strip()
        if hit.group(1):
            dm = re.match(r'(.*?)(\w+)\s*\[\s*\]$', decl, re.S)
            if not dm:
                raise SystemExit('transform.py: cannot parse extern __shared__ %r' % decl)
            ty = dm.group(1).strip()
            new = '%s* const %s = (%s*)emu::dynamic_smem();' % (ty, dm.group(2), ty)
        else:
            names = [re.search(r'(\w+)\s*(?:\[[^\]]*\]\s*)*$', d.strip()).group(1)
                     for d in split_top(decl, decl)]
            new = 'static %s;%s' % (decl, ''.join(' emu::shared_var(%s, sizeof %s);' % (n, n) for n in names))
        s.edits.append((hit.start(), end + 1, new))


def rewrite_skips(s, skips):
    t, m = s.text, s.masked
    for name, why in skips.items():
        for hit in re.finditer(r'(?m)^[ \t]*(%s)\s*\(' % re.escape(name), m):
            b = match_close(m, hit.end() - 1, '(', ')')
            semi = b + 1
            while m[semi].isspace():
                semi += 1
            if m[semi] != ';':
                continue  # a definition or declaration, not a call statement
            call = re.sub(r'\s+', ' ', t[hit.start(1):b + 1]).replace('\\', '\\\\').replace('"', '\\"').replace('%', '%%')
            s.edits.append((hit.start(1), semi + 1,
                            'printf("ok - %s # skip %s\\n"); fflush(stdout);' % (call, why)))


def main(argv):
    outdir, files, skips, i = argv[0], [], {}, 1
    while i < len(argv):
        if argv[i] == '--skip-call':
            name, _, why = argv[i + 1].partition('=')
            skips[name] = why or 'not run under emulation'
            i += 2
        else:
            files.append(argv[i])
            i += 1
    texts = {f: open(f).read() for f in files}
    bounds = {}
    for f in files:
        bounds.update(launch_bounds(blank_comments_and_strings(texts[f])))
    for f in files:
        s = Source(texts[f])
        rewrite_launches(s, bounds)
        rewrite_asm(s)
        rewrite_shared(s)
        rewrite_skips(s, skips)
        dst = os.path.join(outdir, f)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        text = '#line 1 "%s"\n%s' % (f, s.apply())
        if not os.path.exists(dst) or open(dst).read() != text:  # keep the mtime when unchanged
            with open(dst, 'w') as fh:
                fh.write(text)


if __name__ == '__main__':
    main(sys.argv[1:])
