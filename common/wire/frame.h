/* Frames on the wire: a fixed 16-byte little-endian prefix (magic, version,
 * flags, header length, payload length), a protobuf Envelope header, then an
 * optional raw payload of tensor bytes that never passes through protobuf.
 * The reader is a pure state machine so that it can be tested byte by byte;
 * conn.c drives it from libuv. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "envelope.pb-c.h"

#define FRAME_MAGIC 0x50415357u /* the bytes "WSAP" */
#define FRAME_VERSION 1u
#define FRAME_PREFIX_LEN 16u

/* Prefix flags. FRAME_FLAG_SHM: the payload lies in the sender's
 * shared-memory ring (conn.c), and the socket carries in its place the
 * FRAME_SHM_REF_LEN bytes saying where: u64 offset in the ring, u64 end of
 * the payload in the ring's running count of bytes. Only after the
 * receiver has mapped that ring (frame_reader.shm_ok). FRAME_FLAG_SHARED,
 * only with FRAME_FLAG_SHM: the ring is the sender's shared ring (one
 * ring read by several peers of its host, shm.h), not the connection's
 * own. */
#define FRAME_FLAG_SHM 1u
#define FRAME_FLAG_SHARED 2u
#define FRAME_SHM_REF_LEN 16u

#define FRAME_DEFAULT_MAX_HEADER (1u << 20)   /* 1 MiB: a plan carries its job file */
#define FRAME_DEFAULT_MAX_PAYLOAD (64u << 20) /* 64 MiB: one tensor chunk */

typedef struct frame_limits {
    uint32_t max_header;  /* bytes of protobuf header accepted */
    uint32_t max_payload; /* bytes of raw payload accepted */
} frame_limits;

/* Writes the prefix for a frame with the given lengths into out (flags 0,
 * or frame_prefix_encode_flags). */
void frame_prefix_encode(uint8_t out[FRAME_PREFIX_LEN], uint32_t header_len, uint32_t payload_len);
void frame_prefix_encode_flags(uint8_t out[FRAME_PREFIX_LEN], uint32_t header_len,
                               uint32_t payload_len, uint16_t flags);

/* Checks a prefix. Returns 0, -EBADMSG for a bad magic, -EPROTONOSUPPORT for
 * another version, -EMSGSIZE when a length breaks the limits, -EPROTO for an
 * empty header, an unknown flag, or FRAME_FLAG_SHARED without
 * FRAME_FLAG_SHM; *flags gets the flags. */
int frame_prefix_decode(const uint8_t in[FRAME_PREFIX_LEN], const frame_limits *lim,
                        uint32_t *header_len, uint32_t *payload_len, uint16_t *flags);

/* Decodes an Envelope as every reader of frames does: protobuf-c's unpack,
 * and then a refusal of what protobuf-c keeps but cannot read once written
 * back (an over-long key naming field 0, in any message inside), since a
 * daemon writes back what it keeps (a plan, a held message, a forwarded
 * chunk). Returns NULL for a malformed header; free with
 * appliance__envelope__free_unpacked. */
Appliance__Envelope *frame_envelope_unpack(const uint8_t *buf, size_t len);

/* Serialises prefix + header into one malloc'd buffer of *len bytes (the
 * payload is sent separately), with room for `extra` more bytes after them
 * (not counted in *len). Returns NULL when out of memory. */
uint8_t *frame_encode(const Appliance__Envelope *env, uint32_t payload_len, size_t *len);
uint8_t *frame_encode_flags(const Appliance__Envelope *env, uint32_t payload_len, uint16_t flags,
                            size_t extra, size_t *len);

/* Called by the reader. */
typedef struct frame_sink {
    /* Once a header is decoded and a payload follows: where to put the
     * payload bytes (len bytes of room), or NULL for a reader-owned buffer.
     * May set *err to a negative code to refuse the frame. */
    void *(*payload_dest)(void *ctx, const Appliance__Envelope *env, uint32_t len, int *err);
    /* A complete frame. env and a reader-owned payload are freed after the
     * call returns. A nonzero return stops the reader with that error. */
    int (*on_frame)(void *ctx, Appliance__Envelope *env, uint8_t *payload, uint32_t len);
    /* A FRAME_FLAG_SHM frame's payload: copies the len bytes at ring offset
     * off (ending at end in the ring's running count) to dst and frees
     * them in the ring; flags: the frame's (FRAME_FLAG_SHARED: which
     * ring). 0, or a negative code with why filled. */
    int (*shm_take)(void *ctx, uint64_t off, uint64_t end, uint8_t *dst, uint32_t len,
                    uint16_t flags, char *why, size_t whylen);
    void *ctx;
} frame_sink;

enum frame_reader_state {
    FRAME_READ_PREFIX,
    FRAME_READ_HEADER,
    FRAME_READ_PAYLOAD,
    FRAME_READ_SHM_REF, /* the FRAME_SHM_REF_LEN bytes of a shared-memory payload */
    FRAME_READ_FAILED,
};

typedef struct frame_reader {
    frame_limits lim;               /* hard limits checked before allocating */
    frame_sink sink;                /* where frames go */
    enum frame_reader_state state;  /* what the next bytes are */
    uint8_t prefix[FRAME_PREFIX_LEN];
    uint32_t have;                  /* bytes of the current part received */
    uint32_t header_len;            /* of the frame being read */
    uint32_t payload_len;           /* of the frame being read */
    uint8_t *header;                /* malloc'd, header_len bytes */
    Appliance__Envelope *env;       /* decoded header while its payload arrives */
    uint8_t *payload;               /* destination of the payload */
    bool payload_owned;             /* payload was malloc'd by the reader */
    bool shm_ok;                    /* FRAME_FLAG_SHM frames accepted (a ring is mapped) */
    bool yield;                     /* set by the sink: frame_reader_feed_part stops after
                                     * the frame being delivered */
    uint16_t flags;                 /* of the frame being read */
    uint8_t shm_ref[FRAME_SHM_REF_LEN];
    int error;                      /* first error, once FAILED */
    char error_text[128];           /* what went wrong, for the peer and the log */
} frame_reader;

void frame_reader_init(frame_reader *r, const frame_limits *lim, const frame_sink *sink);
void frame_reader_deinit(frame_reader *r);

/* Consumes len bytes. Returns 0, or a negative code once the stream is broken
 * (then error_text says why and every later call fails the same way). */
int frame_reader_feed(frame_reader *r, const uint8_t *data, size_t len);
/* The same, but stops once a frame is delivered during which the sink set
 * r->yield (cleared at the start of each call and when it stops): *used
 * says how many of the len bytes were consumed, the rest to be fed later. */
int frame_reader_feed_part(frame_reader *r, const uint8_t *data, size_t len, size_t *used);

/* While a payload is expected: the place where the next bytes belong and how
 * many are still missing, so that a socket can read straight into it.
 * Returns false in any other state. */
bool frame_reader_direct(frame_reader *r, uint8_t **dst, size_t *len);
/* Accounts for n bytes written through frame_reader_direct's pointer. */
int frame_reader_advance(frame_reader *r, size_t n);

/* Name of a message type for logs ("weight_chunk"), "none" for unset. */
const char *frame_msg_name(Appliance__Envelope__MsgCase c);
