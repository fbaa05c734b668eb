/* cmd_worker.c: `tuned worker --device N`, not for people: the GPU worker
 * process the daemon starts (src/daemon/worker.h); it speaks JSON lines on
 * stdin/stdout. Hidden from --help. */
#include "src/daemon/worker.h"
#include "tools/cli.h"

int cli_cmd_worker(const cli_opts *o)
{
    return tuned__worker_main(o->request.device, o->db);
}
