/* daemon.h: `tuned serve`, the daemon, as the CLI starts it.
 *
 * The daemon answers stored configs over a Unix socket (and, when asked,
 * TCP on loopback) in newline-delimited JSON (docs/protocol.md) and tunes
 * in the background, one worker process per GPU. tuned__serve() runs until
 * SIGTERM or SIGINT, then stops accepting, answers requests in flight with
 * shutting_down, lets running jobs finish their chunk and checkpoint,
 * closes every handle and the store, and returns. SIGHUP re-reads the
 * store. A store that cannot be opened for writing (full disk, read-only
 * file system) is served read-only: get and list, no tune. */
#ifndef TUNED_DAEMON_DAEMON_H
#define TUNED_DAEMON_DAEMON_H

#include <stdbool.h>
#include <stddef.h>

#include "src/common/err.h"

/* Longest Unix socket path (sizeof sockaddr_un.sun_path - 1). */
#define TUNED__SOCKET_PATH_MAX 107

typedef struct tuned__serve_opts {
    char socket_path[TUNED__SOCKET_PATH_MAX + 1];
    char group[64];          /* "": socket mode 0600; else 0660 and this group */
    char listen[128];        /* "": no TCP; "[HOST:]PORT" (HOST defaults to 127.0.0.1) */
    char db[4096];           /* the store directory */
    char worker_exe[4096];   /* "": this executable (/proc/self/exe) */
    unsigned max_clients;    /* connections at once (default 1024) */
    unsigned unix_reserve;   /* of those, kept for Unix-socket clients: TCP
                                clients get at most max_clients - this (default 32) */
    double idle_timeout_s;   /* a client with nothing in flight for this long is
                                closed (default 60) */
    size_t max_output_total; /* reply bytes queued for all clients together; past
                                it the client with the most is cut off (default 256 MiB) */
    size_t max_line;         /* bytes in one request line (default 65536) */
    size_t max_output;       /* reply bytes queued per client before it is
                                no longer read (default 1 MiB); 4x that closes it */
    unsigned max_jobs;       /* queued tune jobs (default 64) */
    double variant_timeout_s;/* longest a worker may go without a result (default 60) */
    double client_timeout_s; /* a client that reads none of its replies for this
                                long is cut off (default 30) */
    double shutdown_grace_s; /* running chunk's time to finish at a stop (default 10) */
    int worker_nice;         /* the workers' nice value (default 10) */
    bool quiet;              /* no log lines on stderr */
    bool retune_compatible;  /* a key `get` answers from the compatible tier is
                                tuned here once, in the background, at the
                                quick effort (its search starts from that
                                record's config) */
    /* The fleet tier (docs/fleet.md), in a build with it (TUNED_HAVE_FLEET). */
    char remote[1024];       /* "": none; "redis://HOST[:PORT][/DB]" or "unix:///PATH[?db=N]" */
    char remote_credentials[4096]; /* "": none; a FILE, or "env:NAME" */
    double remote_timeout_s; /* each fleet call (default 1) */
    double lease_s;          /* a tune's lease, renewed every third of it (default 30) */
    double reclaim_s;        /* a fleet queue job unacknowledged this long is taken
                                over from its consumer (default 300) */
} tuned__serve_opts;

void tuned__serve_opts_default(tuned__serve_opts *o);

/* Checks every option without touching anything (no directory, socket,
 * store or worker), the socket path included (another daemon listening
 * on it, or a file that is not a socket): 0, or TUNED_EINVAL naming the
 * bad one. tuned__serve()
 * calls it first; the CLI may call it earlier. */
int tuned__serve_check(const tuned__serve_opts *o, tuned__err *e);

/* The default socket path is tuned__listen_socket() (src/client/client.h);
 * clients look there first (tuned__default_socket()). */

/* Runs the daemon until SIGTERM/SIGINT. 0 after a clean stop (every
 * handle closed, uv_loop_close() == 0, the store closed). */
int tuned__serve(const tuned__serve_opts *o, tuned__err *e);

#endif
