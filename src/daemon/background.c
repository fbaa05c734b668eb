/* background.c: threads for the daemon's idle-priority work
 * (background.h).
 *
 * A finished thread puts its work on a list under a mutex and wakes the
 * loop through one uv_async_t (libuv coalesces several sends into one
 * callback, so the list, not the callback count, says what finished). The
 * loop joins each thread before calling done, so no thread outlives the
 * daemon, and the daemon stops only when none runs. */
#include "src/daemon/background.h"

#include <string.h>

#include "src/common/priority.h"
#include "tuned.h"

static void *bg_thread(void *arg)
{
    tuned__bg_work *w = arg;
    w->prio_rc = tuned__thread_idle(&w->prio_err);
    w->work(w);
    tuned__bg *bg = w->bg;
    pthread_mutex_lock(&bg->lock);
    w->next = bg->finished;
    bg->finished = w;
    pthread_mutex_unlock(&bg->lock);
    /* Only fails for a handle that is not an async one: cannot happen. */
    (void)uv_async_send(&bg->async);
    return NULL;
}

static void on_finished(uv_async_t *a)
{
    tuned__bg *bg = a->data;
    pthread_mutex_lock(&bg->lock);
    tuned__bg_work *list = bg->finished;
    bg->finished = NULL;
    pthread_mutex_unlock(&bg->lock);
    while (list != NULL) {
        tuned__bg_work *w = list;
        list = w->next;
        pthread_join(w->thread, NULL); /* it has only its return left */
        bg->running--;
        w->done(w);
    }
}

int tuned__bg_init(tuned__bg *bg, uv_loop_t *loop, tuned__err *e)
{
    memset(bg, 0, sizeof *bg);
    int rc = pthread_mutex_init(&bg->lock, NULL);
    if (rc != 0)
        return tuned__errf(e, TUNED_EIO, "background: pthread_mutex_init: %s", strerror(rc));
    bg->lock_ready = true;
    if ((rc = uv_async_init(loop, &bg->async, on_finished)) != 0)
        return tuned__errf(e, TUNED_EIO, "background: uv_async_init: %s", uv_strerror(rc));
    bg->async.data = bg;
    bg->open = true;
    return 0;
}

int tuned__bg_start(tuned__bg *bg, tuned__bg_work *w, tuned__err *e)
{
    if (!bg->open)
        return tuned__errf(e, TUNED_EINVAL, "background: not open");
    w->bg = bg;
    w->next = NULL;
    w->prio_rc = 0;
    int rc = pthread_create(&w->thread, NULL, bg_thread, w);
    if (rc != 0)
        return tuned__errf(e, TUNED_EIO, "background: pthread_create: %s", strerror(rc));
    bg->running++;
    return 0;
}

void tuned__bg_close(tuned__bg *bg)
{
    if (bg->open && !uv_is_closing((uv_handle_t *)&bg->async))
        uv_close((uv_handle_t *)&bg->async, NULL);
    bg->open = false;
}

void tuned__bg_free(tuned__bg *bg)
{
    if (bg->lock_ready)
        pthread_mutex_destroy(&bg->lock);
    bg->lock_ready = false;
}
