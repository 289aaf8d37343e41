/* TensorBoard event files. */
#include "summaries.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "crc32c.h"
#include "event.pb-c.h"
#include "fsutil.h"

struct summaries {
    FILE *f;
    char path[PATH_MAX + 128];
    int err;                /* first write error; nothing is written after it */
};

static double summaries__now(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* One TFRecord: length, masked CRC of the length, data, masked CRC of the data. */
static int summaries__record(summaries *s, const Tensorboard__Event *ev)
{
    if (s->err)
        return s->err;
    size_t len = tensorboard__event__get_packed_size(ev);
    uint8_t *buf = malloc(len + 16);
    if (!buf)
        return s->err = -ENOMEM;
    put_le64(buf, len);
    put_le32(buf + 8, crc32c_masked(buf, 8));
    tensorboard__event__pack(ev, buf + 12);
    put_le32(buf + 12 + len, crc32c_masked(buf + 12, len));
    if (fwrite(buf, 1, len + 16, s->f) != len + 16)
        s->err = errno ? -errno : -EIO;
    free(buf);
    return s->err;
}

summaries *summaries_open(const char *dir, char *err, size_t errlen)
{
    int rc = fsutil_mkdir_p(dir);
    if (rc < 0) {
        snprintf(err, errlen, "cannot create %s: %s", dir, strerror(-rc));
        return NULL;
    }
    summaries *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    char host[64] = "localhost";
    gethostname(host, sizeof(host) - 1);
    snprintf(s->path, sizeof(s->path), "%s/events.out.tfevents.%ld.%s.appliance", dir,
             (long)summaries__now(), host);
    s->f = fopen(s->path, "wb");
    if (!s->f) {
        snprintf(err, errlen, "cannot create %s: %s", s->path, strerror(errno));
        free(s);
        return NULL;
    }
    Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
    ev.wall_time = summaries__now();
    ev.what_case = TENSORBOARD__EVENT__WHAT_FILE_VERSION;
    ev.file_version = "brain.Event:2";
    summaries__record(s, &ev);
    summaries_flush(s);
    return s;
}

int summaries_scalar(summaries *s, const char *tag, int64_t step, double value)
{
    Tensorboard__SummaryValue v = TENSORBOARD__SUMMARY_VALUE__INIT;
    v.tag = (char *)tag;
    v.simple_value = (float)value;
    Tensorboard__SummaryValue *vals[1] = {&v};
    Tensorboard__Summary sum = TENSORBOARD__SUMMARY__INIT;
    sum.n_value = 1;
    sum.value = vals;
    Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
    ev.wall_time = summaries__now();
    ev.step = step;
    ev.what_case = TENSORBOARD__EVENT__WHAT_SUMMARY;
    ev.summary = &sum;
    return summaries__record(s, &ev);
}

void summaries_flush(summaries *s)
{
    if (s && s->f)
        fflush(s->f);
}

void summaries_close(summaries *s)
{
    if (!s)
        return;
    if (s->f)
        fclose(s->f);
    free(s);
}

const char *summaries_path(const summaries *s)
{
    return s->path;
}
