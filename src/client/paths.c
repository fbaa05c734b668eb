/* paths.c: where the store and the daemon's socket are when nobody says:
 * the one place their environment variables are read, so that the CLI,
 * the daemon, the embedding library and Python agree. */
#include <stdio.h>
#include <stdlib.h>

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

void tuned__default_socket(char *out, size_t n)
{
    const char *env = getenv("TUNED_SOCKET");
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    if (env != NULL && *env != '\0')
        snprintf(out, n, "%s", env);
    else if (xdg != NULL && *xdg == '/')
        snprintf(out, n, "%s/tuned/tuned.sock", xdg);
    else
        snprintf(out, n, "/run/tuned/tuned.sock");
}
