/* Fuzz target: the incremental frame reader (common/frame.c), as a socket
 * drives it. The first byte of the input picks how the stream is cut into
 * reads and where payloads go; the rest is the byte stream of a connection.
 * Every frame delivered is encoded again and must read back the same. With
 * 0x20 in the first byte the handler asks the reader to yield after every
 * frame (frame_reader_feed_part, as conn.c bounds a turn's ring copies):
 * the reader stops at frame boundaries only, and fed the rest, it delivers
 * what one feed delivers. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "frame.h"
#include "fuzz.h"

/* Small limits keep a claimed length from costing a large allocation. */
#define FUZZ_FRAME_MAX_HEADER (64u << 10)
#define FUZZ_FRAME_MAX_PAYLOAD (256u << 10)

enum {
    CUT_WHOLE = 0,   /* one read of everything */
    CUT_BYTES = 1,   /* one byte per read */
    CUT_VARIED = 2,  /* read sizes taken from the stream's own bytes */
    CUT_DIRECT = 3,  /* payloads written through frame_reader_direct */
};

typedef struct fuzz_frame_ctx {
    unsigned flags;
    size_t frames;                          /* delivered */
    uint8_t dest[FUZZ_FRAME_MAX_PAYLOAD];   /* a caller-owned payload destination */
    bool dest_busy;                         /* dest holds the payload being read */
    frame_reader *r;                        /* the reader being fed */
    bool yields;                            /* the handler yields after every frame */
} fuzz_frame_ctx;

/* The second reader's sink: the frame that was encoded again. */
typedef struct fuzz_echo {
    Appliance__Envelope__MsgCase want;
    const uint8_t *payload;
    uint32_t len;
    size_t frames;
} fuzz_echo;

static int echo_frame(void *ctx, Appliance__Envelope *env, uint8_t *payload, uint32_t len)
{
    fuzz_echo *e = ctx;
    FUZZ_ASSERT(env->msg_case == e->want);
    FUZZ_ASSERT(len == e->len);
    FUZZ_ASSERT(len == 0 || memcmp(payload, e->payload, len) == 0);
    e->frames++;
    return 0;
}

/* Encodes env again and reads it back with a fresh reader. */
static void fuzz_reencode(const Appliance__Envelope *env, const uint8_t *payload, uint32_t len)
{
    size_t hlen;
    uint8_t *head = frame_encode(env, len, &hlen);
    FUZZ_ASSERT(head != NULL);
    fuzz_echo e = {.want = env->msg_case, .payload = payload, .len = len};
    /* Re-encoding may grow a header (a negative int32 sent in 5 bytes goes
     * out in 10): room for that. */
    frame_limits lim = {4 * FUZZ_FRAME_MAX_HEADER, FUZZ_FRAME_MAX_PAYLOAD};
    frame_sink sink = {.on_frame = echo_frame, .ctx = &e};
    frame_reader r;
    frame_reader_init(&r, &lim, &sink);
    int rc = frame_reader_feed(&r, head, hlen);
    if (rc == 0 && len > 0)
        rc = frame_reader_feed(&r, payload, len);
    FUZZ_ASSERT(rc == 0);
    FUZZ_ASSERT(e.frames == 1);
    frame_reader_deinit(&r);
    free(head);
}

static void *fuzz_payload_dest(void *ctx, const Appliance__Envelope *env, uint32_t len, int *err)
{
    fuzz_frame_ctx *c = ctx;
    FUZZ_ASSERT(len > 0 && len <= FUZZ_FRAME_MAX_PAYLOAD);
    FUZZ_ASSERT(env->msg_case != APPLIANCE__ENVELOPE__MSG__NOT_SET);
    switch ((c->frames + (c->flags >> 2)) % 3) {
    case 0:
        return NULL; /* the reader's own buffer */
    case 1:
        c->dest_busy = true;
        return c->dest;
    default:
        *err = -EINVAL; /* refused, as a handler refuses a chunk out of range */
        return NULL;
    }
}

/* A payload in shared memory (with 0x40 in the first byte the reader has
 * a ring): a ring of 1 MiB whose bytes are their offsets' low bytes; a
 * reference outside it is refused, as the ring's check refuses it. */
static int fuzz_shm_take(void *ctx, uint64_t off, uint64_t end, uint8_t *dst, uint32_t len,
                         uint16_t flags, char *why, size_t whylen)
{
    (void)ctx;
    FUZZ_ASSERT(flags & FRAME_FLAG_SHM);
    FUZZ_ASSERT(len > 0 && len <= FUZZ_FRAME_MAX_PAYLOAD);
    if (end < len || off > (1u << 20) || len > (1u << 20) - off) {
        snprintf(why, whylen, "out of the ring");
        return -EPROTO;
    }
    for (uint32_t i = 0; i < len; i++)
        dst[i] = (uint8_t)(off + i);
    return 0;
}

static int fuzz_on_frame(void *ctx, Appliance__Envelope *env, uint8_t *payload, uint32_t len)
{
    fuzz_frame_ctx *c = ctx;
    FUZZ_ASSERT(env->msg_case != APPLIANCE__ENVELOPE__MSG__NOT_SET);
    FUZZ_ASSERT(frame_msg_name(env->msg_case) != NULL);
    FUZZ_ASSERT((len == 0) == (payload == NULL));
    FUZZ_ASSERT(!c->dest_busy || payload == c->dest);
    c->dest_busy = false;
    fuzz_reencode(env, payload, len);
    c->frames++;
    if (c->yields)
        c->r->yield = true;
    /* A handler may stop the reader; it must stay stopped. */
    return (c->flags & 0x80) && c->frames == 3 ? -EPROTO : 0;
}

/* Feeds size bytes into r in the reads the flags' cut says; with 0x20 each
 * read is fed in parts, up to each frame the handler yielded after. */
static int fuzz_feed(frame_reader *r, fuzz_frame_ctx *c, const uint8_t *data, size_t size)
{
    int rc = 0;
    size_t pos = 0;
    unsigned cut = c->flags & 3;
    while (pos < size && rc == 0) {
        uint8_t *dst;
        size_t want;
        if (cut == CUT_DIRECT && frame_reader_direct(r, &dst, &want)) {
            FUZZ_ASSERT(want > 0);
            size_t n = size - pos < want ? size - pos : want;
            memcpy(dst, data + pos, n);
            rc = frame_reader_advance(r, n);
            pos += n;
            continue;
        }
        size_t n = cut == CUT_WHOLE ? size - pos : cut == CUT_BYTES ? 1 : 1 + (size_t)data[pos] % 23;
        if (n > size - pos)
            n = size - pos;
        if (!c->yields) {
            rc = frame_reader_feed(r, data + pos, n);
            pos += n;
            continue;
        }
        size_t used;
        rc = frame_reader_feed_part(r, data + pos, n, &used);
        if (rc == 0) {
            FUZZ_ASSERT(used <= n && !r->yield);
            /* stopped early: after a frame, and only there */
            FUZZ_ASSERT(used == n || (used > 0 && r->state == FRAME_READ_PREFIX && r->have == 0));
        }
        pos += rc == 0 ? used : n;
    }
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static fuzz_frame_ctx c;
    c.flags = data[0];
    c.frames = 0;
    c.dest_busy = false;
    data++;
    size--;

    frame_limits lim = {FUZZ_FRAME_MAX_HEADER, FUZZ_FRAME_MAX_PAYLOAD};
    frame_sink sink = {.payload_dest = fuzz_payload_dest,
                       .on_frame = fuzz_on_frame,
                       .shm_take = fuzz_shm_take,
                       .ctx = &c};
    frame_reader r;
    frame_reader_init(&r, &lim, &sink);
    r.shm_ok = (c.flags & 0x40) != 0;
    c.r = &r;
    c.yields = (c.flags & 0x20) != 0;
    int rc = fuzz_feed(&r, &c, data, size);
    if (c.yields) { /* the same stream in whole feeds: the same frames, the same end */
        size_t frames = c.frames;
        frame_reader whole;
        frame_reader_init(&whole, &lim, &sink);
        whole.shm_ok = r.shm_ok;
        c.r = &whole;
        c.yields = false;
        c.frames = 0;
        c.dest_busy = false;
        int rc_whole = fuzz_feed(&whole, &c, data, size);
        FUZZ_ASSERT(rc_whole == rc && c.frames == frames && whole.state == r.state);
        frame_reader_deinit(&whole);
        c.r = &r;
    }
    if (rc < 0) {
        /* A broken stream stays broken, with its reason. */
        FUZZ_ASSERT(r.state == FRAME_READ_FAILED);
        FUZZ_ASSERT(r.error == rc);
        FUZZ_ASSERT(memchr(r.error_text, '\0', sizeof(r.error_text)) != NULL);
        FUZZ_ASSERT(r.error_text[0] != '\0');
        uint8_t more = 0;
        FUZZ_ASSERT(frame_reader_feed(&r, &more, 1) == rc);
        uint8_t *dst;
        size_t want;
        FUZZ_ASSERT(!frame_reader_direct(&r, &dst, &want));
        FUZZ_ASSERT(frame_reader_advance(&r, 1) < 0);
    }
    frame_reader_deinit(&r);

    /* The prefix on its own: what decodes encodes to the same bytes, its
     * flags (FRAME_FLAG_SHM, and FRAME_FLAG_SHARED only with it) included. */
    if (size >= FRAME_PREFIX_LEN) {
        uint32_t hl, pl;
        uint16_t flags;
        if (frame_prefix_decode(data, &lim, &hl, &pl, &flags) == 0) {
            uint8_t again[FRAME_PREFIX_LEN];
            frame_prefix_encode_flags(again, hl, pl, flags);
            FUZZ_ASSERT(memcmp(again, data, FRAME_PREFIX_LEN) == 0);
            FUZZ_ASSERT(hl > 0 && hl <= lim.max_header && pl <= lim.max_payload);
            FUZZ_ASSERT((flags & ~(FRAME_FLAG_SHM | FRAME_FLAG_SHARED)) == 0);
            FUZZ_ASSERT(!(flags & FRAME_FLAG_SHARED) || (flags & FRAME_FLAG_SHM));
        }
    }
    return 0;
}
