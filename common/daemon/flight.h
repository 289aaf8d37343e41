/* A flight recorder: the last FLIGHT_CAP stream and job events a daemon saw
 * or sent (which message, step, layer, tensor, chunk, peer), kept in a ring
 * in memory at the cost of a few stores per frame, and written to the log
 * when a job fails here, is aborted, or goes silent for too long: the
 * record of what happened just before. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "envelope.pb-c.h"

#define FLIGHT_CAP 512

/* The recorder's clock: CLOCK_MONOTONIC in microseconds, one for every
 * process of a host (the traces' t_us, WeightChunk.sent_us). */
uint64_t flight_now_us(void);

typedef struct flight_event {
    uint64_t t_us;        /* monotonic clock */
    uint64_t step;
    uint64_t chunk;       /* element offset of a chunk, samples of a batch, ... */
    uint32_t tensor;
    uint32_t count;       /* elements or samples */
    uint16_t msg;         /* Envelope msg case */
    bool out;             /* sent (true) or received */
    uint8_t pass;         /* a weight chunk's Pass (forward, backward, resident) */
    uint32_t eval;        /* a weight chunk's eval pass (0: the training pass) */
    char peer[40];        /* the peer's name from its Hello, or its address */
} flight_event;

typedef struct flight {
    flight_event ev[FLIGHT_CAP];
    uint64_t n;           /* events recorded since start */
    char job[48];         /* the job whose stream is recorded, "" when none */
    uint32_t *tensor_layer; /* layer of each tensor id of that job, owned */
    size_t ntensors;
    uint64_t last_us;     /* when the last event was recorded */
    uint64_t max_gap_us;  /* the longest silence this job's stream came back from */
    uint64_t dumped_at;   /* n when the ring was last written out */
    FILE *trace;          /* every event also written here (--trace), or NULL */
    uint64_t trace_bytes; /* written so far */
    uint64_t trace_max;   /* the cap: tracing stops there, with a warning */
} flight;

/* Records a message sent to or received from peer. Heartbeats and the
 * authentication exchange are not recorded. */
void flight_note(flight *f, const Appliance__Envelope *env, const char *peer, bool out);

/* Writes the events recorded since the last dump (at most FLIGHT_CAP) to the
 * log at WARN, oldest first, headed by the job and why. */
void flight_dump(flight *f, const char *job_id, const char *why);

/* True (once per silence) when a job's stream has recorded nothing for
 * silence_ms, or twice the longest silence it already came back from (a
 * job whose steps take minutes is slow, not stuck), although the job has
 * not ended: the caller dumps it. */
bool flight_hung(flight *f, uint64_t silence_ms);

/* Formats event i (0 = oldest kept) into out; returns false past the end. */
bool flight_format(const flight *f, size_t i, char *out, size_t outlen);

/* The trace: every event flight_note records is also appended to the file
 * at path as one line, with its monotonic time in microseconds (the same
 * clock in every process of a machine, network namespaces included), so the
 * traces of several daemons line up. The first line names the daemon (self)
 * and the columns. Writing stops, with a warning, after max_bytes. Returns 0,
 * or a negative errno with a message naming the file in err. */
int flight_trace_open(flight *f, const char *path, const char *self, uint64_t max_bytes, char *err,
                      size_t errlen);
/* Writes out what the trace holds in its buffer (once a second, and at the
 * end of a job). */
void flight_trace_flush(flight *f);

/* Frees the tensor map and closes the trace. */
void flight_free(flight *f);
