/* Membership table. Members are few (tens), so a linear scan is right. */
#include "members.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void members_init(members *m, uint32_t timeout_ms)
{
    memset(m, 0, sizeof(*m));
    m->timeout_ms = timeout_ms;
}

void members_deinit(members *m)
{
    free(m->v);
    memset(m, 0, sizeof(*m));
}

static bool member__live(const member *mb)
{
    return mb->state == APPLIANCE__MEMBER_STATE__MEMBER_ALIVE ||
           mb->state == APPLIANCE__MEMBER_STATE__MEMBER_BUSY;
}

member *members_register(members *m, conn *c, const Appliance__Register *r, uint64_t now,
                         member **dup)
{
    *dup = NULL;
    for (size_t i = 0; i < m->n; i++) {
        member *mb = &m->v[i];
        if (mb->role == r->role && strcmp(mb->name, r->name) == 0 && member__live(mb)) {
            *dup = mb;
            return NULL;
        }
    }
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 16;
        member *v = realloc(m->v, cap * sizeof(*v));
        if (!v)
            return NULL;
        m->v = v;
        m->cap = cap;
    }
    member *mb = &m->v[m->n];
    memset(mb, 0, sizeof(*mb));
    mb->load1 = -1;
    mb->id = (uint32_t)++m->n;
    mb->role = r->role;
    snprintf(mb->name, sizeof(mb->name), "%s", r->name);
    snprintf(mb->addr, sizeof(mb->addr), "%s", r->advertised_addr);
    snprintf(mb->peer, sizeof(mb->peer), "%s", c->peer_addr);
    mb->state = APPLIANCE__MEMBER_STATE__MEMBER_ALIVE;
    mb->wafer_memory = r->wafer_memory;
    mb->memory = r->memory;
    mb->disk = r->disk;
    mb->threads = r->threads;
    snprintf(mb->host_id, sizeof(mb->host_id), "%s", r->host_id ? r->host_id : "");
    snprintf(mb->host_name, sizeof(mb->host_name), "%s", r->host_name ? r->host_name : "");
    mb->host_memory = r->host_memory;
    snprintf(mb->isa, sizeof(mb->isa), "%s", r->isa ? r->isa : "");
    mb->conv_block = r->conv_block;
    mb->bf16 = r->bf16;
    mb->simulated = r->role == APPLIANCE__ROLE__ROLE_WSE_NODE && r->simulated;
    mb->last_seen = now;
    mb->c = c;
    /* A restarted daemon replaces its old entry in listings. */
    for (size_t i = 0; i + 1 < m->n; i++) {
        member *old = &m->v[i];
        if (old->role == r->role && strcmp(old->name, r->name) == 0 &&
            old->state == APPLIANCE__MEMBER_STATE__MEMBER_LOST)
            old->state = APPLIANCE__MEMBER_STATE__MEMBER_GONE;
    }
    return mb;
}

member *members_by_conn(members *m, const conn *c)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->v[i].c == c)
            return &m->v[i];
    return NULL;
}

member *members_by_id(members *m, uint32_t id)
{
    return id >= 1 && id <= m->n ? &m->v[id - 1] : NULL;
}

void members_sweep(members *m, uint64_t now, void (*lost)(member *mb, void *arg), void *arg)
{
    for (size_t i = 0; i < m->n; i++) {
        member *mb = &m->v[i];
        if (member__live(mb) && now - mb->last_seen > m->timeout_ms) {
            mb->state = APPLIANCE__MEMBER_STATE__MEMBER_LOST;
            lost(mb, arg);
        }
    }
}

size_t members_idle(const members *m, Appliance__Role role)
{
    size_t k = 0;
    for (size_t i = 0; i < m->n; i++)
        if (m->v[i].role == role && m->v[i].state == APPLIANCE__MEMBER_STATE__MEMBER_ALIVE &&
            !m->v[i].job[0])
            k++;
    return k;
}
