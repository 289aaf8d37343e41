/* A host's memory counted once: members that registered the same host id
 * share its memory, so what they declare (at registration) and what a
 * plan has them hold (at submission and launch) is summed per host and
 * held against what the host has. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "members.h"

/* The name of mb's host in messages: "NAME (ID)", a boot id cut to its
 * first 8 characters; "(unknown host)" without an id. Returns buf. */
const char *hosts_label(const member *mb, char *buf, size_t len);

/* What mb declares it may take of its host's memory: a wse-node its wafer
 * memory (a simulated one none: what it holds, its weight slots and
 * batches, is counted when a job is planned), a memoryx its --memory when it was given one (one that offers
 * the host's memory holds what its jobs' shards need, counted when they
 * are planned); 0 for the others. */
uint64_t hosts_declared_bytes(const member *mb);

/* Whether the live members of mb's host declare more memory than the host
 * has (the largest host_memory they registered). Then writes a line naming
 * the host, the members and the numbers into out and returns true. A
 * member without a host id or host memory is never counted. */
bool hosts_declared_over(const members *m, const member *mb, char *out, size_t len);

/* What a plan has one member hold. */
typedef struct hosts_use {
    const member *mb;
    uint64_t bytes;      /* its plan (a wse-node), its shard in memory (memoryx), its buffers' bound */
} hosts_use;

/* Sums uses (n, one per member) by host and holds each sum against the
 * host's memory (the largest host_memory of its members in uses). Returns
 * 0 when every host holds its part; 1 when one does not: err names the
 * first such host and what each role of the job needs there, and *share
 * is the most each wse-node of such hosts could have for the others to
 * fit (the host's memory less its other members' bytes, over its
 * wse-nodes; the least over those hosts; 0 when nothing is left). */
int hosts_check_plan(const hosts_use *use, size_t n, uint64_t *share, char *err, size_t errlen);
