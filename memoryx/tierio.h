/* memoryx's disk tier on the event loop: the weight stream read ahead into
 * buffers and the reduced gradients written to the gradients file, both in
 * the thread pool and within the tier's window of RAM (tier.h). What comes
 * back is reported to the job's driver (mx_job_ops: chunk_read,
 * grad_written); nothing here calls it by name. */
#pragma once

#include <stdint.h>

#include "store.h"
#include "tier.h"

/* Reads the next chunks of the stream ahead (the tier's cursor, ra), one
 * at a time, while the read-ahead window has room. */
void tierio_read_more(mx_job *j);

/* The read-ahead buffer of the stream's chunk seq, or NULL when it is not
 * read yet (its read is then on its way: tierio_read_more). */
mx_rbuf *tierio_ready(mx_job *j, uint64_t seq);

/* b, tierio_ready's, goes to the link (at uv_now `now`): it leaves the
 * ready list and its room comes back once it is written (tierio_sent). */
void tierio_sending(mx_tier *tr, mx_rbuf *b, uint64_t now);

/* conn_done_fn of a buffer tierio_sending gave to the link. */
void tierio_sent(void *arg, int status);

/* A reduced gradient chunk as the wire carries it (payload; owned: freed,
 * here or once written), to the gradients file as float32: count elements
 * of t at offset. The link to swarmx pauses while the window's share for
 * gradients is full, and resumes as writes come back. */
void tierio_grad_wire(mx_job *j, mx_tensor *t, uint64_t offset, uint64_t count, void *payload,
                      void *owned);
