/* sockets.h: the daemon's socket files and addresses, before libuv
 * listens on them (server.c): the Unix socket's directory, a stale socket
 * left by a crash, and the TCP address of --listen. */
#ifndef TUNED_DAEMON_SOCKETS_H
#define TUNED_DAEMON_SOCKETS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "src/common/err.h"

/* mkdir -p of the directory of socket path, each new one with mode; the
 * socket's own directory, when made here, with group gid too ((gid_t)-1:
 * the process's), so that the group may reach the socket in it. */
int tuned__socket_make_dir(const char *path, mode_t mode, gid_t gid, tuned__err *e);

/* Whether path can take the daemon's socket, without changing anything:
 * 0 when nothing is there or a socket nobody listens on (*stale: one left
 * by a crash); TUNED_EINVAL when a live daemon listens on it or it is
 * not a socket; TUNED_EIO when it cannot be told. */
int tuned__socket_probe(const char *path, bool *stale, tuned__err *e);

/* tuned__socket_probe, then a stale socket file at path is removed. */
int tuned__socket_clear_stale(const char *path, tuned__err *e);

/* "[HOST:]PORT" into *sa (HOST defaults to 127.0.0.1; [::1] for IPv6),
 * the host text into host and the port into *port_out; TUNED_EINVAL
 * naming spec otherwise. */
int tuned__listen_parse(const char *spec, struct sockaddr_storage *sa, char *host, size_t hn,
                        long *port_out, tuned__err *e);

#endif
