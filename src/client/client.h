/* client.h: the daemon's protocol (docs/protocol.md) from the client's side.
 *
 * One request is one JSON object on one line, one reply likewise. A
 * tuned__client is one connection: it sends requests and reads their
 * replies in order, each within a deadline, and keeps the bytes of a reply
 * that arrived early. The embedding library, the CLI and the tests all talk
 * to the daemon through it, so there is one implementation of the framing,
 * the limits and the mapping of the daemon's error codes to ours. */
#ifndef TUNED_CLIENT_CLIENT_H
#define TUNED_CLIENT_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "src/codegen/config.h"
#include "src/common/err.h"

/* Longest reply accepted. */
#define TUNED__CLIENT_REPLY_MAX ((size_t)16 << 20)

typedef struct tuned__client {
    int fd;
    char path[108];
    char *buf;         /* bytes received and not yet returned as a reply */
    size_t len, cap;
} tuned__client;

/* Connects to the daemon's Unix socket within timeout_s seconds.
 * TUNED_ENOTFOUND when no daemon listens there (no socket file, or a
 * refused connection: the caller may fall back to the store), TUNED_EINVAL
 * for a path that cannot be a socket's, TUNED_ETIMEOUT, else TUNED_EIO. */
/* Adds "params" (s's key parameters as text, tuned__shape_params_text)
 * to the request object req when they differ from the kind's defaults:
 * what every request naming a shape carries. Returns 0, or -1 when out
 * of memory (req unchanged). */
int tuned__client_add_params(json_t *req, const tuned__shape *s);

int tuned__client_connect(tuned__client *c, const char *socket_path, double timeout_s,
                          tuned__err *e);

/* Closes the connection; safe on a zeroed or closed client. */
void tuned__client_close(tuned__client *c);

/* Sends req (not taken) and reads its reply into *reply within timeout_s.
 * An {"ok":false} reply is returned as it is (0): the caller reads it, or
 * turns it into an error with tuned__client_reply_error(). TUNED_EIO for a
 * transport failure or a reply that is not a JSON object, TUNED_ETIMEOUT. */
int tuned__client_call(tuned__client *c, const json_t *req, double timeout_s, json_t **reply,
                       tuned__err *e);

/* The daemon's error of a {"ok":false} reply as our code (no_gpu and
 * unknown_gpu: TUNED_ENODEV, no_space: TUNED_ENOSPACE, bad_value and
 * too_big: TUNED_EINVAL, store_error: TUNED_ESTORE, anything else
 * TUNED_ETUNE; a malformed reply TUNED_EIO), with "daemon SOCKET: code:
 * message" in e. */
int tuned__client_reply_error(const tuned__client *c, const json_t *reply, tuned__err *e);

/* One connection, one request, one reply, which must be {"ok":true}:
 * connect, call, tuned__client_reply_error for a refusal, close. */
int tuned__client_request(const char *socket_path, const json_t *req, double timeout_s,
                          json_t **reply, tuned__err *e);

/* Asks the daemon to tune shape on the GPU with fingerprint gpu_fp
 * (time_s 0: the daemon's default); its job id in *job. */
int tuned__client_tune(const char *socket_path, const tuned__shape *shape, uint64_t gpu_fp,
                       double time_s, uint64_t *job, tuned__err *e);

/* The state of daemon job `job` ("queued", "running", "done", "failed",
 * "cancelled") into state; its error message, if any, into why. */
int tuned__client_job(const char *socket_path, uint64_t job, char *state, size_t state_n,
                      char *why, size_t why_n, tuned__err *e);

/* The store directory the daemon serves (from its `stats` reply). */
int tuned__client_store_path(const char *socket_path, char *out, size_t n, tuned__err *e);

/* ---- default paths (paths.c) ---- */

/* The store: $TUNED_DB, $XDG_DATA_HOME/tuned, ~/.local/share/tuned,
 * /var/lib/tuned. */
void tuned__default_store(char *out, size_t n);

/* The daemon's socket: $TUNED_SOCKET; else $XDG_RUNTIME_DIR/tuned/tuned.sock
 * when a socket is there (a user's own daemon), else
 * /run/tuned-softmax/tuned.sock when a socket is there (the system
 * service); else, neither running, the first of the two (the runtime
 * directory's only when $XDG_RUNTIME_DIR is set). */
void tuned__default_socket(char *out, size_t n);

/* The socket a daemon listens on by default: $TUNED_SOCKET, else
 * $XDG_RUNTIME_DIR/tuned/tuned.sock when $XDG_RUNTIME_DIR is set, else
 * /run/tuned-softmax/tuned.sock. Not where one listens already: a user's
 * daemon does not take the system service's path because it runs. */
void tuned__listen_socket(char *out, size_t n);

#endif
