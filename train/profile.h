// --profile-step: where one optimizer step's time goes.
//
// While a step is profiled, the device's kernel table (kernels.h: before each kernel), the
// engine (fsdp.h: at each schedule call) and the training loop (host work) drop a mark; the
// time from one mark to the next is charged to the first one's phase. On cuda the marks are
// events on the model's stream, so a phase's time is the GPU's, waits included: "fsdp waits"
// is the compute stream waiting for all-gathers and reduce-scatters (communication that
// compute did not hide), "host" the training loop's own work (data, the stop-signal
// agreement). With NCCL the device also times each collective on its comm stream. Where the
// device counts kernel launches (cuda: CUPTI), each phase's launches are counted too: the
// launches issued between its marks.
#ifndef FSDP_TRAIN_PROFILE_H
#define FSDP_TRAIN_PROFILE_H

#include "fsdp/fsdp.h"
#include "kernels/kernels_sim.h"
#include "train/device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    Device* dev;         // NULL: not profiling
    Fsdp* fsdp;
    int n, cap;
    void** marks;        // the device's marks, in order
    unsigned char* what; // phase * 2 + backward, per mark
    long long* launches; // kernel launches issued before each mark (-1: not counted)
    int layers;          // transformer blocks (the per-block launch count)
    // cuda: the vector kernels' bytes, from the sim device's model of each call (the planner's
    // bytes, which test_traffic_emu holds to the kernels'): the device's table is teed to a
    // sim twin while the step is profiled (inner: the device's own functions).
    int teed;
    Kernels inner, twin;
    SimClock twin_clock;
    double kind_bytes[KERNEL_KINDS][2];
} StepProfile;

// Starts profiling: hooks the device's kernels and the engine's calls. layers: the model's.
void profile_begin(StepProfile* p, Device* d, Fsdp* f, int layers);
// The training loop's own work starts (reading the loss, reductions). No-op when off.
void profile_host(StepProfile* p);
// Ends the profiled step: unhooks, waits for the device, prints rank 0's breakdown (host_ms:
// the step on the host clock), frees the marks.
void profile_report(StepProfile* p, int step, double host_ms, int rank);
static inline int profile_active(const StepProfile* p) { return p->dev != NULL; }
void profile_free(StepProfile* p);

// A model kernel kind's name in the profile's table ("layernorm (+ residual add)", ...).
const char* profile_phase_name(int kind);

// The roofline table of the vector kernels (--profile-step on cuda, --plan): per family and
// direction (embedding, layernorm (+ residual add), cross-entropy; the optimizer's kernels
// when opt_ms >= 0), the bytes moved, the time (time_what: "measured" or "planned"), the
// bytes' time at the copy bandwidth copy_gbs (GB/s; <= 0: unknown, the columns say "-") and
// their ratio, with the bandwidth's source in the header.
void profile_print_roofline(const char* time_what, const double bytes[KERNEL_KINDS][2], const double ms[KERNEL_KINDS][2],
                            double opt_bytes, double opt_ms, double copy_gbs, const char* bw_source);

#ifdef __cplusplus
}
#endif
#endif
