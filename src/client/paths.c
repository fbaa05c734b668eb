/* paths.c: where the store and the daemon's socket are when nobody says:
 * the one place their environment variables are read, so that the CLI,
 * the daemon, the embedding library and Python (bindings/python/tuned/
 * client.py, which follows the same rule) agree. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "src/client/client.h"

void tuned__default_store(char *out, size_t n)
{
    const char *env = getenv("TUNED_DB");
    const char *xdg = getenv("XDG_DATA_HOME");
    const char *home = getenv("HOME");
    if (env != NULL && *env != '\0')
        snprintf(out, n, "%s", env);
    else if (xdg != NULL && *xdg == '/')
        snprintf(out, n, "%s/tuned", xdg);
    else if (home != NULL && *home == '/')
        snprintf(out, n, "%s/.local/share/tuned", home);
    else
        snprintf(out, n, "/var/lib/tuned");
}

/* The system service's socket (tools/tuned-softmax.service): its own
 * directory, clear of /run/tuned, which belongs to the distributions'
 * unrelated tuned (the system tuning daemon). */
#define SERVICE_SOCKET "/run/tuned-softmax/tuned.sock"

static bool is_socket(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISSOCK(st.st_mode);
}

void tuned__listen_socket(char *out, size_t n)
{
    const char *env = getenv("TUNED_SOCKET");
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    if (env != NULL && *env != '\0')
        snprintf(out, n, "%s", env);
    else if (xdg != NULL && *xdg == '/')
        snprintf(out, n, "%s/tuned/tuned.sock", xdg);
    else
        snprintf(out, n, "%s", SERVICE_SOCKET);
}

void tuned__default_socket(char *out, size_t n)
{
    /* A user's own daemon first, then the service; where neither listens
     * (a daemon about to start), where a daemon would listen. */
    tuned__listen_socket(out, n);
    const char *env = getenv("TUNED_SOCKET");
    if ((env != NULL && *env != '\0') || is_socket(out))
        return;
    if (is_socket(SERVICE_SOCKET))
        snprintf(out, n, "%s", SERVICE_SOCKET);
}
