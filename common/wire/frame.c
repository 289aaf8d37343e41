/* Frame encoding and the incremental frame reader. */
#include "frame.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_le64(const uint8_t *p)
{
    return (uint64_t)get_le32(p) | (uint64_t)get_le32(p + 4) << 32;
}

void frame_prefix_encode_flags(uint8_t out[FRAME_PREFIX_LEN], uint32_t header_len,
                               uint32_t payload_len, uint16_t flags)
{
    put_le32(out, FRAME_MAGIC);
    out[4] = (uint8_t)FRAME_VERSION;
    out[5] = (uint8_t)(FRAME_VERSION >> 8);
    out[6] = (uint8_t)flags;
    out[7] = (uint8_t)(flags >> 8);
    put_le32(out + 8, header_len);
    put_le32(out + 12, payload_len);
}

void frame_prefix_encode(uint8_t out[FRAME_PREFIX_LEN], uint32_t header_len, uint32_t payload_len)
{
    frame_prefix_encode_flags(out, header_len, payload_len, 0);
}

int frame_prefix_decode(const uint8_t in[FRAME_PREFIX_LEN], const frame_limits *lim,
                        uint32_t *header_len, uint32_t *payload_len, uint16_t *flags)
{
    if (get_le32(in) != FRAME_MAGIC)
        return -EBADMSG;
    uint16_t version = (uint16_t)(in[4] | in[5] << 8);
    if (version != FRAME_VERSION)
        return -EPROTONOSUPPORT;
    uint16_t f = (uint16_t)(in[6] | in[7] << 8);
    if ((f & ~(FRAME_FLAG_SHM | FRAME_FLAG_SHARED)) ||
        (f & (FRAME_FLAG_SHM | FRAME_FLAG_SHARED)) == FRAME_FLAG_SHARED)
        return -EPROTO;
    *flags = f;
    *header_len = get_le32(in + 8);
    *payload_len = get_le32(in + 12);
    if (*header_len == 0)
        return -EPROTO;
    if (*header_len > lim->max_header || *payload_len > lim->max_payload)
        return -EMSGSIZE;
    return 0;
}

/* No unknown field of m or of a message inside it names field 0. */
static bool frame__fields_valid(const ProtobufCMessage *m)
{
    for (unsigned i = 0; i < m->n_unknown_fields; i++)
        if (m->unknown_fields[i].tag == 0)
            return false;
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        if (f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(base + f->quantifier_offset);
            ProtobufCMessage *const *v = *(ProtobufCMessage *const *const *)(base + f->offset);
            for (size_t k = 0; k < n; k++)
                if (!frame__fields_valid(v[k]))
                    return false;
            continue;
        }
        if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
            *(const uint32_t *)(base + f->quantifier_offset) != f->id)
            continue;
        const ProtobufCMessage *sub = *(const ProtobufCMessage *const *)(base + f->offset);
        if (sub && !frame__fields_valid(sub))
            return false;
    }
    return true;
}

Appliance__Envelope *frame_envelope_unpack(const uint8_t *buf, size_t len)
{
    Appliance__Envelope *env = appliance__envelope__unpack(NULL, len, buf);
    if (env && !frame__fields_valid(&env->base)) {
        appliance__envelope__free_unpacked(env, NULL);
        env = NULL;
    }
    return env;
}

uint8_t *frame_encode_flags(const Appliance__Envelope *env, uint32_t payload_len, uint16_t flags,
                            size_t extra, size_t *len)
{
    size_t hlen = appliance__envelope__get_packed_size(env);
    uint8_t *buf = malloc(FRAME_PREFIX_LEN + hlen + extra);
    if (!buf)
        return NULL;
    frame_prefix_encode_flags(buf, (uint32_t)hlen, payload_len, flags);
    appliance__envelope__pack(env, buf + FRAME_PREFIX_LEN);
    *len = FRAME_PREFIX_LEN + hlen;
    return buf;
}

uint8_t *frame_encode(const Appliance__Envelope *env, uint32_t payload_len, size_t *len)
{
    return frame_encode_flags(env, payload_len, 0, 0, len);
}

void frame_reader_init(frame_reader *r, const frame_limits *lim, const frame_sink *sink)
{
    memset(r, 0, sizeof(*r));
    r->lim = *lim;
    r->sink = *sink;
    r->state = FRAME_READ_PREFIX;
}

static void reader__drop_frame(frame_reader *r)
{
    free(r->header);
    r->header = NULL;
    if (r->env)
        appliance__envelope__free_unpacked(r->env, NULL);
    r->env = NULL;
    if (r->payload_owned)
        free(r->payload);
    r->payload = NULL;
    r->payload_owned = false;
}

void frame_reader_deinit(frame_reader *r)
{
    reader__drop_frame(r);
}

static int reader__fail(frame_reader *r, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int reader__fail(frame_reader *r, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->error_text, sizeof(r->error_text), fmt, ap);
    va_end(ap);
    reader__drop_frame(r);
    r->state = FRAME_READ_FAILED;
    r->error = err;
    return err;
}

/* Hands the finished frame to the sink and gets ready for the next one. */
static int reader__deliver(frame_reader *r)
{
    Appliance__Envelope *env = r->env;
    int rc = r->sink.on_frame(r->sink.ctx, env, r->payload, r->payload_len);
    reader__drop_frame(r);
    r->state = FRAME_READ_PREFIX;
    r->have = 0;
    if (rc != 0)
        return reader__fail(r, rc, "frame refused by its handler");
    return 0;
}

/* The header is complete: decode it and decide where the payload goes. */
static int reader__header_done(frame_reader *r)
{
    r->env = frame_envelope_unpack(r->header, r->header_len);
    free(r->header);
    r->header = NULL;
    if (!r->env)
        return reader__fail(r, -EBADMSG, "header is not a valid Envelope protobuf");
    if (r->env->msg_case == APPLIANCE__ENVELOPE__MSG__NOT_SET)
        return reader__fail(r, -ENOMSG, "unknown message type");
    if (r->payload_len == 0) {
        if (r->flags & FRAME_FLAG_SHM)
            return reader__fail(r, -EPROTO, "shared-memory frame without a payload");
        return reader__deliver(r);
    }
    int err = 0;
    r->payload = r->sink.payload_dest ? r->sink.payload_dest(r->sink.ctx, r->env, r->payload_len, &err)
                                      : NULL;
    if (err < 0)
        return reader__fail(r, err, "%s with a %u-byte payload refused",
                            frame_msg_name(r->env->msg_case), r->payload_len);
    if (!r->payload) {
        r->payload = malloc(r->payload_len);
        if (!r->payload)
            return reader__fail(r, -ENOMEM, "out of memory for a %u-byte payload", r->payload_len);
        r->payload_owned = true;
    }
    r->state = r->flags & FRAME_FLAG_SHM ? FRAME_READ_SHM_REF : FRAME_READ_PAYLOAD;
    r->have = 0;
    return 0;
}

/* A shared-memory payload's place is in: take it out of the ring. */
static int reader__shm_done(frame_reader *r)
{
    char why[96] = "";
    int rc = r->sink.shm_take(r->sink.ctx, get_le64(r->shm_ref), get_le64(r->shm_ref + 8),
                              r->payload, r->payload_len, r->flags, why, sizeof(why));
    if (rc < 0)
        return reader__fail(r, rc, "%s payload in shared memory: %s",
                            frame_msg_name(r->env->msg_case), why);
    return reader__deliver(r);
}

int frame_reader_feed(frame_reader *r, const uint8_t *data, size_t len)
{
    size_t used = 0;
    int rc = 0;
    while (rc == 0 && used < len) {
        size_t n;
        rc = frame_reader_feed_part(r, data + used, len - used, &n);
        used += n;
    }
    return rc;
}

int frame_reader_feed_part(frame_reader *r, const uint8_t *data, size_t len, size_t *used)
{
    const uint8_t *start = data;
    *used = 0;
    r->yield = false; /* only a frame of this call yields */
    while (len > 0) {
        size_t take;
        switch (r->state) {
        case FRAME_READ_FAILED:
            return r->error;
        case FRAME_READ_PREFIX: {
            take = FRAME_PREFIX_LEN - r->have;
            if (take > len)
                take = len;
            memcpy(r->prefix + r->have, data, take);
            r->have += (uint32_t)take;
            if (r->have == FRAME_PREFIX_LEN) {
                int rc = frame_prefix_decode(r->prefix, &r->lim, &r->header_len, &r->payload_len,
                                             &r->flags);
                if (rc == 0 && (r->flags & FRAME_FLAG_SHM) && (!r->shm_ok || !r->sink.shm_take))
                    return reader__fail(r, -EPROTO,
                                        "payload in shared memory, but no ring was agreed");
                if (rc == -EBADMSG)
                    return reader__fail(r, rc, "bad magic 0x%08x", get_le32(r->prefix));
                if (rc == -EPROTONOSUPPORT)
                    return reader__fail(r, rc, "protocol version %u, expected %u",
                                        (unsigned)(r->prefix[4] | r->prefix[5] << 8), FRAME_VERSION);
                if (rc == -EMSGSIZE)
                    return reader__fail(r, rc,
                                        "frame too large: header %u bytes (limit %u), payload %u "
                                        "bytes (limit %u)",
                                        r->header_len, r->lim.max_header, r->payload_len,
                                        r->lim.max_payload);
                if (rc < 0)
                    return reader__fail(r, rc, "malformed frame prefix (flags 0x%02x%02x)",
                                        r->prefix[7], r->prefix[6]);
                r->header = malloc(r->header_len);
                if (!r->header)
                    return reader__fail(r, -ENOMEM, "out of memory for a header");
                r->state = FRAME_READ_HEADER;
                r->have = 0;
            }
            break;
        }
        case FRAME_READ_HEADER:
            take = r->header_len - r->have;
            if (take > len)
                take = len;
            memcpy(r->header + r->have, data, take);
            r->have += (uint32_t)take;
            if (r->have == r->header_len) {
                int rc = reader__header_done(r);
                if (rc < 0)
                    return rc;
            }
            break;
        case FRAME_READ_SHM_REF:
            take = FRAME_SHM_REF_LEN - r->have;
            if (take > len)
                take = len;
            memcpy(r->shm_ref + r->have, data, take);
            r->have += (uint32_t)take;
            if (r->have == FRAME_SHM_REF_LEN) {
                int rc = reader__shm_done(r);
                if (rc < 0)
                    return rc;
            }
            break;
        case FRAME_READ_PAYLOAD:
            take = r->payload_len - r->have;
            if (take > len)
                take = len;
            memcpy(r->payload + r->have, data, take);
            {
                int rc = frame_reader_advance(r, take);
                if (rc < 0)
                    return rc;
            }
            break;
        default:
            return -EINVAL;
        }
        data += take;
        len -= take;
        *used = (size_t)(data - start);
        if (r->yield && r->state == FRAME_READ_PREFIX && r->have == 0) {
            r->yield = false;
            break;
        }
    }
    return 0;
}

bool frame_reader_direct(frame_reader *r, uint8_t **dst, size_t *len)
{
    if (r->state != FRAME_READ_PAYLOAD)
        return false;
    *dst = r->payload + r->have;
    *len = r->payload_len - r->have;
    return true;
}

int frame_reader_advance(frame_reader *r, size_t n)
{
    if (r->state != FRAME_READ_PAYLOAD || n > r->payload_len - r->have)
        return -EINVAL;
    r->have += (uint32_t)n;
    if (r->have == r->payload_len)
        return reader__deliver(r);
    return 0;
}

const char *frame_msg_name(Appliance__Envelope__MsgCase c)
{
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field(&appliance__envelope__descriptor, (unsigned)c);
    return f ? f->name : "none";
}
