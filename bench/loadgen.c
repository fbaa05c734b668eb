/* loadgen.c: a load generator for `tuned serve`: N connections over the
 * Unix socket, each with one `get` in flight at a time (like
 * redis-benchmark -c N -P 1), for a fixed time; prints requests per second
 * and latency percentiles.
 *
 *   loadgen --socket PATH [--connections 64] [--duration 10] [--warmup 1]
 *           [--populate N] [--tune-during]
 *
 * The keys are the stored records the daemon lists (`list`); --populate N
 * first tunes N shapes through the daemon (fast with the test-only fake
 * GPU) when fewer are stored. --tune-during starts a long tune before the
 * measurement and checks it is still running at the end, so the numbers
 * are taken while a job runs. Every reply is checked to be an exact hit.
 * One thread, epoll; latency is from the write of a request to the read
 * of its whole reply line, on CLOCK_MONOTONIC. Exit status 0 when every
 * request got an exact answer. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 4096
#define BUF 8192

typedef struct conn {
    int fd;
    char buf[BUF];
    size_t len;
    uint64_t sent_ns;
    size_t next_key;
} conn;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *fmt, const char *arg)
{
    char msg[512];
    snprintf(msg, sizeof msg, "%s", fmt);
    char *s = strstr(msg, "%s");
    if (s != NULL)
        fprintf(stderr, "loadgen: %.*s%s%s\n", (int)(s - msg), msg, arg, s + 2);
    else
        fprintf(stderr, "loadgen: %s\n", msg);
    exit(1);
}

static int connect_to(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0)
        die("cannot connect to %s", path);
    return fd;
}

/* One blocking request/reply on fd; the reply (without newline) in out. */
static void call(int fd, const char *req, char *out, size_t cap)
{
    size_t n = strlen(req), off = 0;
    while (off < n) {
        ssize_t w = write(fd, req + off, n - off);
        if (w <= 0)
            die("write: %s", strerror(errno));
        off += (size_t)w;
    }
    size_t len = 0;
    for (;;) {
        if (len + 1 >= cap)
            die("%s", "reply too long");
        ssize_t r = read(fd, out + len, cap - 1 - len);
        if (r <= 0)
            die("read: %s", r == 0 ? "EOF" : strerror(errno));
        len += (size_t)r;
        out[len] = '\0';
        char *nl = strchr(out, '\n');
        if (nl != NULL) {
            *nl = '\0';
            return;
        }
    }
}

/* Finds "key":<number> after p; -1 if none. */
static long long num_after(const char *p, const char *key)
{
    const char *k = strstr(p, key);
    return k != NULL ? strtoll(k + strlen(key), NULL, 10) : -1;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const char *sock = NULL;
    int nconn = 64, populate = 0;
    double duration = 10, warmup = 1;
    bool tune_during = false;
    static const struct option opts[] = {
        {"socket", required_argument, NULL, 's'},
        {"connections", required_argument, NULL, 'c'},
        {"duration", required_argument, NULL, 'd'},
        {"warmup", required_argument, NULL, 'w'},
        {"populate", required_argument, NULL, 'p'},
        {"tune-during", no_argument, NULL, 't'},
        {NULL, 0, NULL, 0},
    };
    int ch;
    while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (ch) {
        case 's': sock = optarg; break;
        case 'c': nconn = atoi(optarg); break;
        case 'd': duration = atof(optarg); break;
        case 'w': warmup = atof(optarg); break;
        case 'p': populate = atoi(optarg); break;
        case 't': tune_during = true; break;
        default: die("%s", "usage: loadgen --socket PATH [--connections N] [--duration S] "
                           "[--warmup S] [--populate N] [--tune-during]");
        }
    }
    if (sock == NULL || nconn < 1 || nconn > MAX_CONNS || !(duration > 0))
        die("%s", "usage: loadgen --socket PATH [--connections 1..4096] [--duration S]");

    static char reply[1 << 24];
    int ctl = connect_to(sock);
    /* Populate: tune `populate` shapes (fake GPU: a fraction of a second each). */
    for (int i = 0; i < populate; i++) {
        char req[256];
        snprintf(req, sizeof req,
                 "{\"op\":\"tune\",\"rows\":%d,\"cols\":%d,\"budget\":8,\"seed\":%d}\n",
                 256 << (i % 6), 1024 + 512 * i, i);
        call(ctl, req, reply, sizeof reply);
        long long job = num_after(reply, "\"job\":");
        if (job < 0)
            die("tune refused: %s", reply);
        for (int polls = 0;; polls++) {
            snprintf(req, sizeof req, "{\"op\":\"job\",\"job\":%lld}\n", job);
            call(ctl, req, reply, sizeof reply);
            if (strstr(reply, "\"state\":\"done\"") != NULL)
                break;
            if (strstr(reply, "\"state\":\"failed\"") != NULL || polls > 6000)
                die("populate: %s", reply);
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    /* Keys: every stored record, as ready-made get requests. */
    call(ctl, "{\"op\":\"list\",\"limit\":1000}\n", reply, sizeof reply);
    size_t nkeys = 0, cap = 1000;
    char **keys = calloc(cap, sizeof *keys);
    for (const char *p = strstr(reply, "{\"kernel\""); p != NULL && nkeys < cap;
         p = strstr(p + 1, "{\"kernel\"")) {
        char dtype[8] = "", fp[17] = "";
        const char *d = strstr(p, "\"dtype\":\"");
        const char *g = strstr(p, "\"gpu_fp\":\"");
        if (d == NULL || g == NULL || sscanf(d + 9, "%7[a-z0-9]", dtype) != 1 ||
            sscanf(g + 10, "%16[0-9a-f]", fp) != 1)
            break;
        keys[nkeys] = malloc(256);
        snprintf(keys[nkeys], 256,
                 "{\"op\":\"get\",\"dtype\":\"%s\",\"rows\":%lld,\"cols\":%lld,\"gpu\":\"%s\"}\n",
                 dtype, num_after(p, "\"rows\":"), num_after(p, "\"cols\":"), fp);
        nkeys++;
    }
    if (nkeys == 0)
        die("%s", "no stored records to get (use --populate N)");
    long long tune_job = -1;
    if (tune_during) {
        call(ctl, "{\"op\":\"tune\",\"rows\":8192,\"cols\":8192,\"budget\":100000,\"time_s\":3600}\n",
             reply, sizeof reply);
        tune_job = num_after(reply, "\"job\":");
        if (tune_job < 0)
            die("tune refused: %s", reply);
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }

    conn *cs = calloc((size_t)nconn, sizeof *cs);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    size_t lat_cap = (size_t)(duration * 2e6) + 1024, nlat = 0;
    uint64_t *lat = malloc(lat_cap * sizeof *lat);
    if (cs == NULL || ep < 0 || lat == NULL)
        die("%s", "out of memory");
    uint64_t t0 = now_ns();
    uint64_t t_measure = t0 + (uint64_t)(warmup * 1e9);
    uint64_t t_end = t_measure + (uint64_t)(duration * 1e9);
    uint64_t bad = 0, done_measured = 0;
    for (int i = 0; i < nconn; i++) {
        cs[i].fd = connect_to(sock);
        cs[i].next_key = (size_t)i % nkeys;
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, cs[i].fd, &ev) != 0)
            die("epoll_ctl: %s", strerror(errno));
        const char *k = keys[cs[i].next_key];
        cs[i].sent_ns = now_ns();
        if (write(cs[i].fd, k, strlen(k)) != (ssize_t)strlen(k))
            die("%s", "write");
    }
    struct epoll_event evs[MAX_CONNS];
    uint64_t now = t0;
    while (now < t_end) {
        int n = epoll_wait(ep, evs, MAX_CONNS, 100);
        if (n < 0 && errno != EINTR)
            die("epoll_wait: %s", strerror(errno));
        for (int i = 0; i < n; i++) {
            conn *c = &cs[evs[i].data.u32];
            ssize_t r = read(c->fd, c->buf + c->len, BUF - c->len);
            if (r <= 0)
                die("read from the daemon: %s", r == 0 ? "EOF" : strerror(errno));
            c->len += (size_t)r;
            char *nl = memchr(c->buf, '\n', c->len);
            if (nl == NULL)
                continue;
            now = now_ns();
            *nl = '\0';
            if (strstr(c->buf, "\"source\":\"exact\"") == NULL) {
                if (bad == 0)
                    fprintf(stderr, "loadgen: not an exact hit: %s\n", c->buf);
                bad++;
            }
            if (c->sent_ns >= t_measure && now <= t_end) {
                if (nlat < lat_cap)
                    lat[nlat++] = now - c->sent_ns;
                done_measured++;
            }
            c->len = 0; /* one request in flight: nothing after the newline */
            c->next_key = (c->next_key + (size_t)nconn) % nkeys;
            const char *k = keys[c->next_key];
            size_t kl = strlen(k);
            c->sent_ns = now_ns();
            if (write(c->fd, k, kl) != (ssize_t)kl)
                die("write: %s", strerror(errno));
        }
        if (n == 0)
            now = now_ns();
    }
    qsort(lat, nlat, sizeof *lat, cmp_u64);
    double rps = (double)done_measured / duration;
#define PCT(p) (nlat ? (double)lat[(size_t)((double)(nlat - 1) * (p))] / 1000.0 : 0.0)
    printf("loadgen: %d connections, %zu keys, %.1f s: %" PRIu64 " requests, %.0f req/s\n", nconn,
           nkeys, duration, done_measured, rps);
    printf("loadgen: latency us: p50 %.1f  p90 %.1f  p99 %.1f  p99.9 %.1f  max %.1f\n", PCT(0.5),
           PCT(0.9), PCT(0.99), PCT(0.999), nlat ? (double)lat[nlat - 1] / 1000.0 : 0.0);
    int rc = bad == 0 ? 0 : 1;
    if (bad)
        printf("loadgen: %" PRIu64 " replies were not exact hits\n", bad);
    if (tune_during) {
        char req[128];
        snprintf(req, sizeof req, "{\"op\":\"job\",\"job\":%lld}\n", tune_job);
        call(ctl, req, reply, sizeof reply);
        bool running = strstr(reply, "\"state\":\"running\"") != NULL;
        printf("loadgen: tune job %lld %s during the measurement (%lld variants evaluated so far)\n",
               tune_job, running ? "was running" : "was NOT running",
               num_after(reply, "\"evaluated\":"));
        if (!running)
            rc = 1;
    }
    for (int i = 0; i < nconn; i++)
        close(cs[i].fd);
    close(ctl);
    close(ep);
    for (size_t i = 0; i < nkeys; i++)
        free(keys[i]);
    free(keys);
    free(cs);
    free(lat);
    return rc;
}
