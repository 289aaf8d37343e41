/* Cluster membership: who registered, what they declared, whether they are
 * alive (heartbeats within the timeout) and which job they serve. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "conn.h"

typedef struct member {
    uint32_t id;                  /* unique for the coordinator's lifetime, from 1 */
    Appliance__Role role;
    char name[64];
    char addr[128];               /* advertised HOST:PORT for data links */
    char peer[64];                /* address the coordinator sees */
    Appliance__MemberState state;
    uint64_t wafer_memory;        /* wse-node */
    uint64_t memory;              /* memoryx */
    uint64_t disk;                /* memoryx: room for its disk tier */
    uint32_t threads;
    char host_id[64];             /* the host it runs on; "": unknown (counted alone) */
    char host_name[64];           /* that host's name, for people */
    uint64_t host_memory;         /* that host's memory, bytes; 0: unknown */
    char isa[32];                 /* wse-node: its kernels' instruction set, or "" */
    uint32_t conv_block;          /* wse-node: its blocked layout's channels a block */
    bool bf16;                    /* wse-node: mixed precision computes in bfloat16 */
    bool simulated;               /* wse-node: simulates its compute (Register.simulated) */
    uint64_t last_seen;           /* uv_now of the last message */
    double lag_p99, lag_max;      /* its loop's lag, seconds, as its last heartbeat said */
    double load1;                 /* its host's load average (1 min); -1: unknown */
    conn *c;                      /* control connection, NULL once closed */
    char job[64];                  /* job it serves, "" when idle */
} member;

typedef struct members {
    member *v;                    /* every member ever registered, by id - 1 */
    size_t n, cap;
    uint32_t timeout_ms;          /* silence after which a member is lost */
} members;

void members_init(members *m, uint32_t timeout_ms);
void members_deinit(members *m);

/* Adds a member for a Register on c. A member with the same role and name
 * that is not alive is replaced (a restarted daemon). Returns NULL when out
 * of memory or when a live member already has that name (then *dup is set). */
member *members_register(members *m, conn *c, const Appliance__Register *r, uint64_t now,
                         member **dup);
member *members_by_conn(members *m, const conn *c);
member *members_by_id(members *m, uint32_t id);

/* Marks members silent for longer than the timeout as lost; calls lost(m)
 * for each one that changed. */
void members_sweep(members *m, uint64_t now, void (*lost)(member *mb, void *arg), void *arg);

/* Counts alive members of a role that serve no job. */
size_t members_idle(const members *m, Appliance__Role role);

