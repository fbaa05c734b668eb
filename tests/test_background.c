/* test_background.c: the daemon's idle-priority work (background.c): each
 * work item runs on a thread of its own at SCHED_IDLE, its done callback
 * follows on the loop's thread, several finishing together each get
 * theirs, the loop's thread keeps its own policy, and the loop closes
 * cleanly (uv_loop_close() == 0) once bg is closed. The pacer
 * (src/common/priority.h) yields on a work thread and never on the
 * loop's. */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <uv.h>

#include "src/common/priority.h"
#include "src/daemon/background.h"

#define ITEMS 8
#define PACED_NS 1000000000ull /* the most a work item paces: 1 s */
#define YIELDS 5                 /* the yields a paced work item waits for */

static int failures;
#define EXPECT(c, ...)                                                                           \
    do {                                                                                         \
        if (!(c)) {                                                                              \
            failures++;                                                                          \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                         \
            printf(__VA_ARGS__);                                                                 \
            printf("\n");                                                                        \
        }                                                                                        \
    } while (0)

typedef struct item {
    tuned__bg_work w; /* first: the work's address is the item's */
    pthread_t loop_thread;
    int policy;       /* the work's thread's, read on it */
    bool off_loop;    /* the work ran on another thread than the loop's */
    bool on_loop;     /* done ran on the loop's thread */
    unsigned long yields; /* a pacer's, on the work's thread */
    int done;
} item;

static tuned__bg bg;
static int dones;

static unsigned long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

/* A bulk loop that paces itself for ns, or until it has yielded enough
 * times: its pacer's yields. */
static unsigned long paced_loop(unsigned long long ns, unsigned long enough)
{
    tuned__pacer p;
    tuned__pacer_init(&p);
    for (unsigned long long start = now_ns(); now_ns() - start < ns && p.yields < enough;)
        tuned__pace(&p);
    return p.yields;
}

static void work(tuned__bg_work *w)
{
    item *it = (item *)w;
    it->policy = sched_getscheduler(0);
    it->off_loop = !pthread_equal(pthread_self(), it->loop_thread);
    it->yields = paced_loop(PACED_NS, YIELDS);
}

static void done(tuned__bg_work *w)
{
    item *it = (item *)w;
    it->on_loop = pthread_equal(pthread_self(), it->loop_thread);
    it->done++;
    if (++dones == ITEMS && bg.running == 0)
        tuned__bg_close(&bg); /* the last handle: uv_run returns */
}

int main(void)
{
    uv_loop_t loop;
    tuned__err e = {0};
    EXPECT(uv_loop_init(&loop) == 0, "uv_loop_init");
    EXPECT(tuned__bg_init(&bg, &loop, &e) == 0, "tuned__bg_init: %s", e.msg);
    int before = sched_getscheduler(0);
    item items[ITEMS] = {0};
    for (int i = 0; i < ITEMS; i++) {
        items[i].w.work = work;
        items[i].w.done = done;
        items[i].loop_thread = pthread_self();
        EXPECT(tuned__bg_start(&bg, &items[i].w, &e) == 0, "tuned__bg_start: %s", e.msg);
    }
    EXPECT(bg.running == ITEMS, "%zu running, expected %d", bg.running, ITEMS);
    EXPECT(uv_run(&loop, UV_RUN_DEFAULT) == 0, "uv_run");
    for (int i = 0; i < ITEMS; i++) {
        EXPECT(items[i].done == 1, "item %d: done called %d times", i, items[i].done);
        EXPECT(items[i].policy == SCHED_IDLE, "item %d ran at policy %d, not SCHED_IDLE (%d)", i,
               items[i].policy, SCHED_IDLE);
        EXPECT(items[i].w.prio_rc == 0, "item %d: %s", i, items[i].w.prio_err.msg);
        EXPECT(items[i].off_loop, "item %d ran on the loop's thread", i);
        EXPECT(items[i].on_loop, "item %d: done ran off the loop's thread", i);
        EXPECT(items[i].yields == YIELDS, "item %d: a paced loop at idle priority yielded %lu times",
               i, items[i].yields);
    }
    unsigned long loop_yields = paced_loop(20 * TUNED__PACE_NS, 1);
    EXPECT(loop_yields == 0, "a paced loop on the loop's thread yielded %lu times", loop_yields);
    EXPECT(sched_getscheduler(0) == before, "the loop's thread changed its policy to %d",
           sched_getscheduler(0));
    EXPECT(tuned__bg_start(&bg, &items[0].w, &e) != 0, "a closed bg started work");
    EXPECT(uv_loop_close(&loop) == 0, "uv_loop_close: a handle was left open");
    tuned__bg_free(&bg);
    printf("%d failures\n", failures);
    return failures ? 1 : 0;
}
