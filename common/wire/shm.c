/* Shared-memory rings between daemons on one host (shm.h). */
#include "shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"

/* The header at the start of the mapping (SHM_HEADER_LEN bytes): the
 * token, the sender's flag that it waits for room, and each reader's
 * running count of bytes taken, all on cache lines of their own (a reader
 * writes only its own count, the sender only the flag). */
typedef struct shm_header {
    uint8_t token[SHM_TOKEN_LEN];
    _Alignas(64) _Atomic uint32_t waiting; /* sender: set when it waits for room */
    struct {
        _Alignas(64) _Atomic uint64_t taken; /* a reader: bytes taken, skips included */
    } slot[SHM_READERS];
} shm_header;

_Static_assert(sizeof(shm_header) <= SHM_HEADER_LEN, "the header fits its page");
_Static_assert(SHM_READERS <= 64, "the slots in use are bits of a word");
_Static_assert(SHM_TOKEN_LEN == AUTH_NONCE_LEN, "the token is a nonce");

struct shm_ring {
    uint8_t *map;
    size_t map_len;
    size_t size;        /* ring bytes */
    shm_header *hdr;
    uint8_t *data;
    int fd;             /* sender: the memfd until offered; -1 after */
    uint64_t head;      /* sender: bytes allocated, skips included */
    uint64_t floor;     /* sender: where the last payload put into an empty ring
                         * began: the bytes before it are free, taken or not */
    uint64_t live;      /* sender: the readers' slots in use (bit i: slot i) */
    uint64_t held;      /* sender of a shared ring: the slots offered or in use */
    bool shared;        /* sender: a ring for several readers (shm_ring_create_shared) */
    int refs;           /* shm_ring_ref's, and the creator's */
    uint32_t slot;      /* receiver: its slot */
    bool started;       /* receiver: last_end is known (a shared ring's first take) */
    uint64_t last_end;  /* receiver: the end of the last payload taken */
};

static shm_ring *ring_of(uint8_t *map, size_t map_len, int fd)
{
    shm_ring *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->map = map;
    r->map_len = map_len;
    r->size = map_len - SHM_HEADER_LEN;
    r->hdr = (shm_header *)map;
    r->data = map + SHM_HEADER_LEN;
    r->fd = fd;
    r->refs = 1;
    return r;
}

static shm_ring *shm__create(size_t size, char *why, size_t whylen)
{
    if (size < SHM_RING_MIN || size > SHM_RING_MAX) {
        snprintf(why, whylen, "a ring of %zu bytes (from %u to %llu)", size, SHM_RING_MIN,
                 (unsigned long long)SHM_RING_MAX);
        return NULL;
    }
    size_t len = SHM_HEADER_LEN + size;
    int fd = memfd_create("appliance-shm-ring", MFD_CLOEXEC);
    if (fd < 0) {
        snprintf(why, whylen, "memfd_create: %s", strerror(errno));
        return NULL;
    }
    if (ftruncate(fd, (off_t)len) < 0) {
        snprintf(why, whylen, "cannot size the ring: %s", strerror(errno));
        close(fd);
        return NULL;
    }
    uint8_t *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        snprintf(why, whylen, "cannot map the ring: %s", strerror(errno));
        close(fd);
        return NULL;
    }
    shm_ring *r = ring_of(map, len, fd);
    if (!r) {
        snprintf(why, whylen, "out of memory");
        munmap(map, len);
        close(fd);
        return NULL;
    }
    auth_nonce(r->hdr->token); /* the rest of a fresh memfd is zeros */
    return r;
}

shm_ring *shm_ring_create(size_t size, char *why, size_t whylen)
{
    shm_ring *r = shm__create(size, why, whylen);
    if (r)
        r->live = 1; /* the one reader's slot */
    return r;
}

shm_ring *shm_ring_create_shared(size_t size, char *why, size_t whylen)
{
    shm_ring *r = shm__create(size, why, whylen);
    if (r)
        r->shared = true;
    return r;
}

int shm_ring_reserve(shm_ring *r)
{
    for (int i = 0; r->shared && i < SHM_READERS; i++)
        if (!(r->held >> i & 1)) {
            r->held |= UINT64_C(1) << i;
            return i;
        }
    return -1;
}

void shm_ring_attach(shm_ring *r, int slot)
{
    /* counts from here: the reader takes nothing put before */
    atomic_store(&r->hdr->slot[slot].taken, r->head);
    r->live |= UINT64_C(1) << slot;
}

void shm_ring_release(shm_ring *r, int slot)
{
    if (slot < 0 || slot >= SHM_READERS)
        return;
    r->live &= ~(UINT64_C(1) << slot);
    r->held &= ~(UINT64_C(1) << slot);
}

bool shm_ring_has_readers(const shm_ring *r)
{
    return r->live != 0;
}

int shm_ring_fd(const shm_ring *r)
{
    return r->fd;
}

uint64_t shm_ring_map_len(const shm_ring *r)
{
    return r->map_len;
}

const uint8_t *shm_ring_token(const shm_ring *r)
{
    return r->hdr->token;
}

void shm_ring_offered(shm_ring *r)
{
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
}

shm_ring *shm_ring_open(uint32_t pid, int fd, uint64_t map_len, const uint8_t *token,
                        size_t token_len, char *why, size_t whylen)
{
    return shm_ring_open_slot(pid, fd, map_len, token, token_len, -1, why, whylen);
}

shm_ring *shm_ring_open_slot(uint32_t pid, int fd, uint64_t map_len, const uint8_t *token,
                             size_t token_len, int slot, char *why, size_t whylen)
{
    if (slot >= SHM_READERS) {
        snprintf(why, whylen, "reader slot %d of a ring with %d", slot, SHM_READERS);
        return NULL;
    }
    if (token_len != SHM_TOKEN_LEN) {
        snprintf(why, whylen, "a token of %zu bytes, expected %d", token_len, SHM_TOKEN_LEN);
        return NULL;
    }
    if (map_len < SHM_HEADER_LEN + SHM_RING_MIN || map_len > SHM_HEADER_LEN + SHM_RING_MAX) {
        snprintf(why, whylen, "a mapping of %llu bytes (from %u to %llu)",
                 (unsigned long long)map_len, SHM_HEADER_LEN + SHM_RING_MIN,
                 (unsigned long long)(SHM_HEADER_LEN + SHM_RING_MAX));
        return NULL;
    }
    char path[64];
    snprintf(path, sizeof(path), "/proc/%u/fd/%d", pid, fd);
    int f = open(path, O_RDWR | O_CLOEXEC);
    if (f < 0) {
        snprintf(why, whylen, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(f, &st) < 0 || (uint64_t)st.st_size != map_len) {
        snprintf(why, whylen, "%s is not the %llu-byte ring offered", path,
                 (unsigned long long)map_len);
        close(f);
        return NULL;
    }
    uint8_t *map = mmap(NULL, (size_t)map_len, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
    close(f);
    if (map == MAP_FAILED) {
        snprintf(why, whylen, "cannot map %s: %s", path, strerror(errno));
        return NULL;
    }
    if (memcmp(map, token, SHM_TOKEN_LEN) != 0) {
        snprintf(why, whylen, "%s holds another token: not the peer's ring", path);
        munmap(map, (size_t)map_len);
        return NULL;
    }
    shm_ring *r = ring_of(map, (size_t)map_len, -1);
    if (!r) {
        snprintf(why, whylen, "out of memory");
        munmap(map, (size_t)map_len);
        return NULL;
    }
    r->slot = slot < 0 ? 0 : (uint32_t)slot;
    /* a ring of its own starts where the sender is; a slot of a shared
     * ring counts from where the sender attaches it, known at the first
     * payload (sent only after that) */
    r->started = slot < 0;
    r->last_end = atomic_load(&r->hdr->slot[r->slot].taken);
    return r;
}

shm_ring *shm_ring_ref(shm_ring *r)
{
    r->refs++;
    return r;
}

void shm_ring_free(shm_ring *r)
{
    if (!r || --r->refs > 0)
        return;
    munmap(r->map, r->map_len);
    if (r->fd >= 0)
        close(r->fd);
    free(r);
}

size_t shm_ring_size(const shm_ring *r)
{
    return r->size;
}

size_t shm_ring_used(const shm_ring *r)
{
    /* from the slowest reader in use; a count below the floor (the bytes
     * skipped when the ring was last empty) or past the head (a reader
     * may write anything in its slot) counts as the floor or the head */
    uint64_t taken = r->head;
    for (uint64_t m = r->live; m; m &= m - 1) {
        uint64_t t = atomic_load(&r->hdr->slot[__builtin_ctzll(m)].taken);
        if (t < r->floor)
            t = r->floor;
        if (t < taken)
            taken = t;
    }
    return (size_t)(r->head - taken);
}

size_t shm_ring_wait(shm_ring *r)
{
    /* sequentially consistent both ways: either the receiver's next take
     * sees the flag, or this load sees that take */
    atomic_store(&r->hdr->waiting, 1);
    return shm_ring_used(r);
}

bool shm_ring_put(shm_ring *r, const void *src, size_t len, uint64_t *off, uint64_t *end)
{
    if (len == 0 || len > r->size)
        return false;
    size_t pos = (size_t)(r->head % r->size), used = shm_ring_used(r);
    if (used == 0 && pos) {
        /* an empty ring: from its start again, so that a burst fills it
         * from there and its pages past the most it ever held are never
         * touched (the tail skipped is free: nothing is left to take) */
        r->head += r->size - pos;
        r->floor = r->head;
        pos = 0;
    }
    /* the tail skipped when the payload does not fit before the end */
    size_t skip = pos + len > r->size ? r->size - pos : 0;
    if (used + skip + len > r->size)
        return false;
    *off = skip ? 0 : pos;
    memcpy(r->data + *off, src, len);
    r->head += skip + len;
    *end = r->head;
    return true;
}

int shm_ring_take(shm_ring *r, uint64_t off, uint64_t end, void *dst, size_t len, bool *wake,
                  char *why, size_t whylen)
{
    *wake = false;
    /* the payload is [end - len, end) of the running count: right after
     * the last one, or at the ring's start next (the sender skipped the
     * tail), and at its place in the ring */
    if (!r->started) {
        r->last_end = atomic_load(&r->hdr->slot[r->slot].taken);
        r->started = true;
    }
    uint64_t start = end - len, pos = r->last_end % r->size;
    bool next = len > 0 && len <= r->size && end >= len &&
                (start == r->last_end || (pos && start == r->last_end + (r->size - pos))) &&
                off == start % r->size && off + len <= r->size;
    if (!next) {
        snprintf(why, whylen,
                 "%zu bytes at %llu ending at %llu, after %llu taken: not the next payload of "
                 "a %zu-byte ring", len, (unsigned long long)off, (unsigned long long)end,
                 (unsigned long long)r->last_end, r->size);
        return -EPROTO;
    }
    memcpy(dst, r->data + off, len);
    r->last_end = end;
    atomic_store(&r->hdr->slot[r->slot].taken, end);
    if (atomic_load(&r->hdr->waiting) && atomic_exchange(&r->hdr->waiting, 0))
        *wake = true;
    return 0;
}
