/* test_tune_lock.c: one child tune of a shape at a time across processes
 * sharing a store (api_child.c's lock file), with a fake `tuned` and no
 * GPU. Three processes ask for the same shape at once: their children run
 * one after another, never two together (the second and third find the
 * store's winner in a real tune; the fake only notes that it ran). A
 * different shape is not held up by them. A store where no lock can be
 * made is tuned unlocked. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "src/api/api.h"

#include "tests/expect.h"

static void write_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    EXPECT(f != NULL, "fopen %s", path);
    if (f != NULL) {
        fputs(text, f);
        fclose(f);
        chmod(path, mode);
    }
}

static int count_lines(const char *path, const char *word)
{
    FILE *f = fopen(path, "r");
    int n = 0;
    char line[256];
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        n += strstr(line, word) != NULL;
    if (f != NULL)
        fclose(f);
    return n;
}

/* Forks n processes that each run the child for shape; waits for all. */
static void run_many(const tuned__api_child *c, int n)
{
    pid_t pids[8];
    for (int i = 0; i < n; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            tuned__err e = {0};
            int rc = tuned__api_run_child(c, &e);
            if (rc != 0)
                fprintf(stderr, "child tune: %s\n", e.msg);
            _exit(rc == 0 ? 0 : 1);
        }
    }
    for (int i = 0; i < n; i++) {
        int status = 0;
        waitpid(pids[i], &status, 0);
        EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "process %d: status %d", i, status);
    }
}

int main(void)
{
    char dir[] = "/tmp/test_tune_lock.XXXXXX";
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    char bin[300], store[300], log[300], meet[320], script[2400];
    snprintf(bin, sizeof bin, "%s/fake-tuned", dir);
    snprintf(store, sizeof store, "%s/store", dir);
    snprintf(log, sizeof log, "%s/log", dir);
    mkdir(store, 0700);
    /* Notes "overlap" when another child of the same shape is running.
     * Where the file meet exists, a child waits (10 s at most) until two
     * children run at once and then notes "together": proof, on however
     * loaded a machine, that neither waited for the other. */
    snprintf(script, sizeof script,
             "#!/bin/sh\n"
             "mark='%s/running-'\"$3\"\n"
             "[ -e \"$mark\" ] && echo overlap >> '%s'\n"
             "touch \"$mark\"\n"
             "running() { ls '%s' | grep -c '^running-'; }\n"
             "if [ -e '%s/meet' ]; then\n"
             "  i=0; while [ $i -lt 100 ] && [ \"$(running)\" -lt 2 ]; do sleep 0.1; i=$((i+1)); done\n"
             "  [ \"$(running)\" -ge 2 ] && echo together >> '%s'\n"
             "  sleep 0.3\n"
             "else\n"
             "  sleep 0.4\n"
             "fi\n"
             "rm -f \"$mark\"\n"
             "echo \"ran $3\" >> '%s'\n",
             dir, log, dir, dir, log, log);
    write_file(bin, script, 0755);

    tuned__api_child c = {.binary = bin, .store = store, .device = 0,
                          .shape = {.dtype = TUNED_FP16, .rows = 256, .cols = 1000},
                          .timeout_s = 30};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    run_many(&c, 3);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    EXPECT(count_lines(log, "ran 256x1000") == 3, "%d runs", count_lines(log, "ran 256x1000"));
    EXPECT(count_lines(log, "overlap") == 0, "two children of one shape ran together");
    EXPECT(took >= 1.1, "three 0.4 s children took %.2f s: not one after another", took);
    char lock[400];
    snprintf(lock, sizeof lock, "%s/tune-locks/softmax-256x1000-fp16-gpu0.lock", store);
    EXPECT(access(lock, F_OK) == 0, "no lock file %s", lock);

    /* Two shapes at once: neither waits for the other. */
    snprintf(meet, sizeof meet, "%s/meet", dir);
    write_file(meet, "", 0600);
    pid_t other = fork();
    if (other == 0) {
        tuned__api_child d = c;
        d.shape.cols = 2000;
        tuned__err e = {0};
        _exit(tuned__api_run_child(&d, &e) == 0 ? 0 : 1);
    }
    run_many(&c, 1);
    int status = 0;
    waitpid(other, &status, 0);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT(count_lines(log, "together") >= 1, "two shapes never ran at once: one waited");
    unlink(meet);

    /* No lock where the store cannot hold one: the tune still runs. */
    c.store = "/nonexistent/store";
    tuned__err e = {0};
    EXPECT(tuned__api_run_child(&c, &e) == 0, "unlocked: %s", e.msg);
    return expect_done("tune-lock", dir);
}
