/* test_client.c: the client's connect (src/client/client.c) against a real
 * Unix socket whose listen backlog is full: a connect storm's view of the
 * daemon. The connect must wait and retry until its deadline, then say the
 * daemon is busy (a full backlog has no connection pending, so reporting
 * "connected" would fail only at the first send); and it must succeed as
 * soon as the listener accepts the connection that filled the backlog.
 * Also: a socket path with no listener is "not found", at once; and the
 * path a daemon listens on by default is $TUNED_SOCKET, else the runtime
 * directory's whenever $XDG_RUNTIME_DIR is set (no probe: a daemon at the
 * system service's path does not change it), else the service's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "expect.h"
#include "src/client/client.h"
#include "src/common/clock.h"

/* A listening socket at path with a backlog of 0: Linux then queues one
 * connection and refuses the next with EAGAIN. */
static int listen_at(const char *path)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(fd, 0) != 0) {
        fprintf(stderr, "test_client: listen at %s: %s\n", path, strerror(errno));
        exit(1);
    }
    return fd;
}

int main(void)
{
    char dir[] = "/tmp/tuned-test-client-XXXXXX";
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    char path[sizeof dir + 16];
    snprintf(path, sizeof path, "%s/sock", dir);
    tuned__err e = {0};
    tuned__client first, second;

    EXPECT_RC(tuned__client_connect(&first, path, 1.0, &e), TUNED_ENOTFOUND, &e);
    EXPECT_MSG(&e, "is `tuned serve` running?");

    int lfd = listen_at(path);
    EXPECT_OK(tuned__client_connect(&first, path, 1.0, &e), &e);

    /* The backlog is full: the second waits out its deadline, then says so. */
    double t0 = tuned__now_s();
    EXPECT_RC(tuned__client_connect(&second, path, 0.3, &e), TUNED_ETIMEOUT, &e);
    double waited = tuned__now_s() - t0;
    EXPECT(waited >= 0.29 && waited < 2.0, "a full backlog waited %.3f s of a 0.3 s deadline",
           waited);
    EXPECT_MSG(&e, "busy");
    EXPECT(second.fd == -1, "a failed connect left fd %d open", second.fd);

    /* A listener that accepts the first connection after 0.2 s frees the
     * backlog's place: the second connects then, within its deadline. */
    pid_t child = fork();
    if (child == 0) {
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
        int a = accept(lfd, NULL, NULL);
        _exit(a < 0 ? 1 : 0);
    }
    EXPECT(child > 0, "fork: %s", strerror(errno));
    t0 = tuned__now_s();
    EXPECT_OK(tuned__client_connect(&second, path, 5.0, &e), &e);
    waited = tuned__now_s() - t0;
    EXPECT(waited >= 0.15 && waited < 2.0, "connected after %.3f s; the place opened at 0.2 s",
           waited);
    int status = 0;
    EXPECT(child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) &&
               WEXITSTATUS(status) == 0,
           "the accepting child failed (status %d)", status);

    tuned__client_close(&first);
    tuned__client_close(&second);
    close(lfd);
    unlink(path);

    char got[512], want[512];
    unsetenv("TUNED_SOCKET");
    setenv("XDG_RUNTIME_DIR", dir, 1);
    snprintf(want, sizeof want, "%s/tuned/tuned.sock", dir);
    tuned__listen_socket(got, sizeof got);
    EXPECT(strcmp(got, want) == 0, "listen socket %s, want %s", got, want);
    setenv("TUNED_SOCKET", "/tmp/elsewhere.sock", 1);
    tuned__listen_socket(got, sizeof got);
    EXPECT(strcmp(got, "/tmp/elsewhere.sock") == 0, "listen socket %s with TUNED_SOCKET", got);
    unsetenv("TUNED_SOCKET");
    unsetenv("XDG_RUNTIME_DIR");
    tuned__listen_socket(got, sizeof got);
    EXPECT(strcmp(got, "/run/tuned-softmax/tuned.sock") == 0, "listen socket %s without XDG", got);
    rmdir(dir);
    return expect_done("test_client", NULL);
}
