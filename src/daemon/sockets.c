/* sockets.c: the daemon's socket files and addresses (sockets.h). */
#include "src/daemon/sockets.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <uv.h>

#include "src/daemon/daemon.h"
#include "tuned.h"

int tuned__socket_make_dir(const char *path, mode_t mode, gid_t gid, tuned__err *e)
{
    char dir[TUNED__SOCKET_PATH_MAX + 1];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL || slash == dir)
        return 0;
    *slash = '\0';
    for (char *p = dir + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        bool made = mkdir(dir, mode) == 0;
        if (!made && errno != EEXIST)
            return tuned__errf(e, TUNED_EIO, "socket %s: cannot create %s: %s", path, dir,
                               strerror(errno));
        if (made && saved == '\0' && gid != (gid_t)-1 && chown(dir, (uid_t)-1, gid) != 0)
            return tuned__errf(e, TUNED_EIO, "socket %s: cannot give %s its group: %s", path,
                               dir, strerror(errno));
        *p = saved;
        if (saved == '\0')
            break;
    }
    return 0;
}

int tuned__socket_probe(const char *path, bool *stale, tuned__err *e)
{
    *stale = false;
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0
                               : tuned__errf(e, TUNED_EIO, "socket %s: %s", path, strerror(errno));
    if (!S_ISSOCK(st.st_mode))
        return tuned__errf(e, TUNED_EINVAL, "socket %s: exists and is not a socket; not "
                           "replacing it", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return tuned__errf(e, TUNED_EIO, "socket: %s", strerror(errno));
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    int live = connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    int err = errno;
    close(fd);
    if (live)
        return tuned__errf(e, TUNED_EINVAL, "socket %s: another daemon is listening on it", path);
    if (err != ECONNREFUSED && err != ENOENT)
        return tuned__errf(e, TUNED_EIO, "socket %s: %s", path, strerror(err));
    *stale = err == ECONNREFUSED;
    return 0;
}

int tuned__socket_clear_stale(const char *path, tuned__err *e)
{
    bool stale;
    int rc = tuned__socket_probe(path, &stale, e);
    if (rc != 0 || !stale)
        return rc;
    if (unlink(path) != 0 && errno != ENOENT)
        return tuned__errf(e, TUNED_EIO, "socket %s: cannot remove the stale socket: %s", path,
                           strerror(errno));
    return 0;
}

int tuned__listen_parse(const char *spec, struct sockaddr_storage *sa, char *host, size_t hn,
                        long *port_out, tuned__err *e)
{
    snprintf(host, hn, "127.0.0.1");
    const char *port_s = spec;
    const char *colon = strrchr(spec, ':');
    if (colon != NULL) {
        size_t n = (size_t)(colon - spec);
        if (n >= hn || n == 0)
            return tuned__errf(e, TUNED_EINVAL, "--listen %s: bad host", spec);
        memcpy(host, spec, n);
        host[n] = '\0';
        if (host[0] == '[' && host[n - 1] == ']') { /* [::1]:port */
            memmove(host, host + 1, n - 2);
            host[n - 2] = '\0';
        }
        port_s = colon + 1;
    }
    char *end;
    long port = strtol(port_s, &end, 10);
    if (*port_s == '\0' || *end != '\0' || port < 0 || port > 65535)
        return tuned__errf(e, TUNED_EINVAL, "--listen %s: expected [HOST:]PORT, PORT 0 to 65535",
                           spec);
    int rc = strchr(host, ':') != NULL ? uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)sa)
                                       : uv_ip4_addr(host, (int)port, (struct sockaddr_in *)sa);
    if (rc != 0)
        return tuned__errf(e, TUNED_EINVAL, "--listen %s: bad address: %s", spec, uv_strerror(rc));
    *port_out = port;
    return 0;
}
