/* A one-way ring of shared memory between two processes on one host: the
 * sender copies a frame's payload into it and sends only where it lies
 * (FRAME_FLAG_SHM); the receiver copies it out to where it belongs and
 * frees the room. The sender creates the ring (a memfd) and offers it; the
 * receiver maps it through /proc/PID/fd/FD and checks the random token at
 * its start, so a ring is only ever mapped by a process of the same host
 * that can read the sender's descriptors. Nothing is left behind when the
 * processes end: a memfd has no name.
 *
 * The mapping: a 4096-byte header (the token, the sender's flag that it
 * waits for room, and each reader's running count of bytes taken), then
 * the ring. A ring of one connection has one reader (slot 0); a shared
 * ring (shm_ring_create_shared) has up to SHM_READERS, each in a slot of
 * its own, and the sender's room is what the slowest leaves: a sender
 * that sends the same payloads to several peers of its host copies them
 * once (swarmx's weights down to its wse-nodes), and each peer copies
 * them out. A shared ring's sender never waits for room: it sends over
 * the connection's own ring or socket while the shared one is full. The sender allocates a payload's bytes contiguously, skipping the
 * ring's tail when a payload does not fit before the end, or when the ring
 * is empty (so that a burst always fills it from its start and its pages
 * past the most it ever held stay untouched); both sides count the bytes
 * (skips included) from the start, and a payload ending at `end` in that
 * count lies at `end - len` modulo the ring's size. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHM_TOKEN_LEN 32
#define SHM_HEADER_LEN 4096u
#define SHM_RING_MIN (64u << 10)        /* ring bytes a side may offer, at least */
#define SHM_RING_MAX (UINT64_C(1) << 30) /* and at most: what a receiver maps */
#define SHM_READERS 62                    /* slots of a shared ring's readers */

typedef struct shm_ring shm_ring;

/* Sender: a new ring of `size` bytes (SHM_RING_MIN to SHM_RING_MAX) and its
 * memfd, kept open until shm_ring_offered. NULL with why filled. */
shm_ring *shm_ring_create(size_t size, char *why, size_t whylen);
/* Sender: a shared ring, for several readers of this host; no reader is
 * in use until attached. Its memfd stays open while it lives, for the
 * readers offered it later. */
shm_ring *shm_ring_create_shared(size_t size, char *why, size_t whylen);
/* Sender of a shared ring: a free slot held for a reader about to be
 * offered it, or -1 when none is left (or the ring is not shared). */
int shm_ring_reserve(shm_ring *r);
/* The reader of the slot mapped the ring: it takes the payloads put from
 * now on, and the room counts its takes. Before the first payload sent
 * to it through the ring. */
void shm_ring_attach(shm_ring *r, int slot);
/* The reader of the slot is gone: its slot is free, and counts no more;
 * -1 is ignored. */
void shm_ring_release(shm_ring *r, int slot);
/* Sender: some reader is attached. */
bool shm_ring_has_readers(const shm_ring *r);
/* What the offer carries: the descriptor, the mapping's bytes, the token. */
int shm_ring_fd(const shm_ring *r);
uint64_t shm_ring_map_len(const shm_ring *r);
const uint8_t *shm_ring_token(const shm_ring *r);
/* The peer answered the offer: the descriptor is closed (the mapping
 * stays). */
void shm_ring_offered(shm_ring *r);

/* Receiver: maps the ring process pid offered as descriptor fd, of
 * map_len bytes, and checks its token. NULL with why filled (no such
 * process or descriptor here, another size, another token). */
shm_ring *shm_ring_open(uint32_t pid, int fd, uint64_t map_len, const uint8_t *token,
                        size_t token_len, char *why, size_t whylen);
/* The same for the reader of slot `slot` of a shared ring (-1: a ring of
 * one connection), which takes from where the sender attaches the slot. */
shm_ring *shm_ring_open_slot(uint32_t pid, int fd, uint64_t map_len, const uint8_t *token,
                             size_t token_len, int slot, char *why, size_t whylen);

/* Another reference to r (a shared ring held by the connections it is
 * offered on); returns r. */
shm_ring *shm_ring_ref(shm_ring *r);
/* Drops a reference; the last unmaps (and closes) a ring of either side.
 * NULL is ignored. */
void shm_ring_free(shm_ring *r);

/* The ring's bytes (the mapping less its header). */
size_t shm_ring_size(const shm_ring *r);

/* Sender: copies len bytes of src into the ring when they fit: true, with
 * the offset they start at and their end in the running count; false
 * (nothing written) when the room the receiver has freed is too small. */
bool shm_ring_put(shm_ring *r, const void *src, size_t len, uint64_t *off, uint64_t *end);
/* Sender: the bytes allocated and not yet taken by the slowest reader,
 * skips included. */
size_t shm_ring_used(const shm_ring *r);
/* Sender: asks the receiver to say when it next takes something (its
 * shm_ring_take sets *wake); returns shm_ring_used after asking, so that
 * a take between the two is not missed. */
size_t shm_ring_wait(shm_ring *r);

/* Receiver: checks that a payload of len bytes at off ending at end is
 * the next one the sender can have written, copies it to dst and frees
 * its room. *wake: the sender waits for room (tell it). 0, or -EPROTO with
 * why filled. */
int shm_ring_take(shm_ring *r, uint64_t off, uint64_t end, void *dst, size_t len, bool *wake,
                  char *why, size_t whylen);
