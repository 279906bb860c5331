// TensorBoard event files, written by rank 0 beside metrics.jsonl (train/metrics.c) so that a
// run can be watched with `tensorboard --logdir` or synced by `wandb sync --sync-tensorboard`
// without a protobuf runtime: the few messages needed are encoded by hand.
//
// A file is a sequence of TFRecords: uint64 length, masked CRC32C of those 8 bytes, the data,
// masked CRC32C of the data (little-endian). Each record's data is one Event message:
//   Event      { double wall_time = 1; int64 step = 2; string file_version = 3;
//                Summary summary = 5; SessionLog session_log = 7; }   (6: a deprecated LogMessage)
//   Summary    { repeated Value value = 1; }  Value { string tag = 1; float simple_value = 2; }
//   SessionLog { Status status = 1; }         (START = 1)
// The first event names the format ("brain.Event:2"). Every event is framed whole in memory
// and written with one fwrite and a flush: a kill leaves at most a truncated last record,
// which readers skip.
#ifndef FSDP_TRAIN_TENSORBOARD_H
#define FSDP_TRAIN_TENSORBOARD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

// CRC32C (Castagnoli, reflected polynomial 0x82F63B78), continued from crc (0 to start).
uint32_t tb_crc32c(uint32_t crc, const void* data, size_t n);
// TFRecord's masking of a CRC stored beside the data it covers.
uint32_t tb_masked_crc(uint32_t crc);
// Frames n bytes of data as one TFRecord into out (n + 16 bytes); returns n + 16.
size_t tb_frame_record(const uint8_t* data, size_t n, uint8_t* out);

// One scalar of a step's Summary.
typedef struct {
    const char* tag;
    float value;
} TbScalar;

// Encodes an Event into out (at most cap bytes): wall_time and step always; file_version when
// non-NULL; session_start: a SessionLog START; then n scalars as one Summary. The length, or
// 0 when it does not fit.
size_t tb_encode_event(uint8_t* out, size_t cap, double wall_time, int64_t step, const char* file_version,
                       int session_start, const TbScalar* scalars, int n);

typedef struct {
    FILE* fp;            // NULL: not writing
    char path[1400];     // the event file
} TbWriter;

// Creates dir if missing and opens a new events.out.tfevents.<unix seconds>.<host>.<pid> in it
// (a file per start, never appended to; the seconds past any earlier file's, for the order), writing the file_version event. resume_step >= 0: the
// run continues a checkpoint of that many steps; a SessionLog START at resume_step + 1 follows,
// on which TensorBoard drops what earlier files logged from that step on (what the interrupted
// run logged after its checkpoint, logged again now). 0, or 1 with one line in err naming
// --tensorboard and dir.
int tb_open(TbWriter* w, const char* dir, int resume_step, char* err, size_t errlen);
// Appends one event of n scalars at step (a no-op when not open). 0, or 1 with one line in err.
int tb_write_scalars(TbWriter* w, int64_t step, const TbScalar* scalars, int n, char* err, size_t errlen);
// Closes the file (a no-op when not open). 0, or 1 with one line in err when the close fails.
int tb_close(TbWriter* w, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
