/* launch.h: how a variant is launched: its grid, block and dynamic shared
 * memory, the attributes its function needs, and, for a row split over
 * the grid, its workspace and cooperative launch.
 *
 * The evaluator (which times variants) and the embedding API (which runs
 * the winners) both launch through here, so a variant runs the same way
 * where it is measured and where it is used. */
#ifndef TUNED_DRIVER_LAUNCH_H
#define TUNED_DRIVER_LAUNCH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "src/codegen/config.h"
#include "src/driver/driver.h"

typedef struct tuned__launch {
    CUfunction fn;
    unsigned grid, block, smem;
    /* A row split over the grid: every block must be resident at once, so
     * the launch is cooperative (the driver refuses a grid that cannot be,
     * rather than letting it wait forever), and it needs a workspace of
     * work_bytes (0 otherwise). */
    bool cooperative;
    size_t work_bytes;
    /* The kind: its entry point takes its tensors, (rows, cols,
     * row_stride), its scalars, then for a grid split (workspace, launch
     * number) (src/codegen/kind.h). */
    const tuned__kind_spec *kind;
    /* The key's parameters: an optional tensor whose presence the key
     * names (present_param, a router's bias) must come exactly where the
     * key says, for the kernel compiles in that path alone. */
    uint32_t key_params;
} tuned__launch;

/* Device memory for the (max, sum) pairs of grid-split launches and the
 * count of launches made with it: launch n uses slot n % TUNED__GRID_SLOTS;
 * the tags of its pairs come from the slot's epoch on the GPU, so that a
 * launch replayed from a CUDA graph tags each replay anew
 * (softmax_grid_common.cu). Launches on one stream never overlap; launches on
 * several streams may share one workspace while fewer than
 * TUNED__GRID_SLOTS of them run at once. */
typedef struct tuned__workspace {
    CUdeviceptr base;
    size_t bytes;
    _Atomic uint32_t launches;
} tuned__workspace;

/* Sets fn's attributes for c (clusters over 8 blocks, dynamic shared
 * memory) and computes its launch for shape s on a GPU of sm_count SMs:
 * register rows: ceil(rows / c.rows) * blocks a row; tma: persistent,
 * min(rows, occupancy * SMs / cluster) * cluster blocks. */
int tuned__launch_prepare(const tuned__driver *d, CUfunction fn, const tuned__config *c,
                          const tuned__shape *s, int sm_count, tuned__launch *out, tuned__err *e);

/* Allocates a zeroed workspace of bytes in the current context. */
int tuned__workspace_alloc(const tuned__driver *d, tuned__workspace *w, size_t bytes,
                           tuned__err *e);

/* Frees it (in the current context); safe on a zeroed or freed one. */
void tuned__workspace_free(const tuned__driver *d, tuned__workspace *w);

/* Enqueues l on stream for rows x cols with row_stride elements between
 * rows: tensors holds one device pointer per tensor of l's kind, in its
 * spec's order (forward kernels x, y; backward y, dy, dx; ...), params its
 * options block (the kind's params_size bytes: a forward softmax's float
 * scale; ignored when the kind has none). work must hold l->work_bytes
 * when l needs one. Returns the driver's result, for the caller to report
 * in its words: CUDA_ERROR_INVALID_VALUE, launching nothing, where an
 * optional tensor's presence is not what l's key says. */
CUresult tuned__launch_run(const tuned__driver *d, const tuned__launch *l, tuned__workspace *work,
                           const CUdeviceptr *tensors, long long rows, int cols,
                           long long row_stride, const void *params, CUstream stream);

#endif
