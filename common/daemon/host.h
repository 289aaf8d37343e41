/* The host a daemon runs on, as the coordinator counts it: what names its
 * memory and how much of it there is. Daemons that share one running kernel
 * (processes, containers, network namespaces) share its memory: the
 * kernel's boot id names it. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Writes the host's identity into id (len bytes): the kernel's boot id,
 * else /etc/machine-id, else the host name. Returns 0, or a negative code
 * when none can be read. */
int host_identity(char *id, size_t len);

/* The host's memory in bytes: its physical memory, or the memory.max of
 * this process's cgroup or of an ancestor where lower; 0 when unknown. */
uint64_t host_memory(void);

/* The lowest memory.max on the way from the cgroup that cgroup_text (the
 * text of /proc/self/cgroup) names up to the root, with the cgroup v2 tree
 * mounted at root; UINT64_MAX when none is set (or cgroup v2 is not
 * there). */
uint64_t host_cgroup_limit(const char *root, const char *cgroup_text);

/* Parses a share of the host's memory: a fraction ("0.375") or a
 * fraction divided by a whole number ("0.75/2": three quarters shared by
 * two). Returns 0 with *share in (0, 1], or -EINVAL. */
int host_share_parse(const char *s, double *share);
