/* swarmx's collective sums: the children in scope of a key, their
 * contributions, the sum in child order. */
#include "collective.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "msgcheck.h"

/* Contributions are summed where they landed: the payload must be aligned
 * for doubles (malloc's alignment, and a multiple of 8 before it). */
_Static_assert(offsetof(swx_buf, data) % sizeof(double) == 0, "swx_buf payload not aligned for doubles");

static void swx_colls__mark(swx_colls *t, size_t k, uint32_t group)
{
    t->beneath[k * t->row + group / 8] |= (uint8_t)(1u << (group % 8));
}

/* Marks, for child k, the groups of the replicas beneath swarmx node top.
 * The walk keeps a stack of the nodes to visit; seen visits each node once,
 * so that a plan whose tree has a cycle cannot keep it walking. */
static int swx_colls__walk(swx_colls *t, size_t k, const Appliance__Plan *p, uint32_t top,
                           uint8_t *seen, uint32_t *stack, char *why, size_t whylen)
{
    uint32_t parts = msgcheck_parts(p);
    size_t sp = 0;
    memset(seen, 0, p->n_swarm);
    seen[top] = 1;
    stack[sp++] = top;
    while (sp > 0) {
        const Appliance__PlanSwarmNode *s = p->swarm[stack[--sp]];
        for (size_t i = 0; i < s->n_children_replicas; i++) {
            if (s->children_replicas[i] >= p->n_replicas) {
                snprintf(why, whylen, "tree node %u has replica %u of %zu", s->index,
                         s->children_replicas[i], p->n_replicas);
                return -EINVAL;
            }
            swx_colls__mark(t, k, s->children_replicas[i] / parts);
        }
        for (size_t i = 0; i < s->n_children_swarmx; i++) {
            uint32_t c = s->children_swarmx[i];
            if (c >= p->n_swarm) {
                snprintf(why, whylen, "tree node %u has child node %u of %zu", s->index, c,
                         p->n_swarm);
                return -EINVAL;
            }
            if (!seen[c]) {
                seen[c] = 1;
                stack[sp++] = c;
            }
        }
    }
    return 0;
}

/* Fills the rows of beneath: a replica child is its own group; a swarmx
 * child has the groups of its whole subtree. */
static int swx_colls__fill(swx_colls *t, const Appliance__Plan *p, const Appliance__PlanSwarmNode *me,
                           char *why, size_t whylen)
{
    uint8_t *seen = malloc(p->n_swarm);
    uint32_t *stack = malloc(p->n_swarm * sizeof(*stack));
    int rc = 0;
    if (!seen || !stack) {
        snprintf(why, whylen, "out of memory");
        rc = -ENOMEM;
    }
    size_t k = 0;
    for (size_t i = 0; rc == 0 && i < me->n_children_replicas; i++, k++) {
        if (me->children_replicas[i] >= p->n_replicas) {
            snprintf(why, whylen, "tree node %u has replica %u of %zu", me->index,
                     me->children_replicas[i], p->n_replicas);
            rc = -EINVAL;
        } else {
            swx_colls__mark(t, k, me->children_replicas[i] / msgcheck_parts(p));
        }
    }
    for (size_t i = 0; rc == 0 && i < me->n_children_swarmx; i++, k++) {
        if (me->children_swarmx[i] >= p->n_swarm) {
            snprintf(why, whylen, "tree node %u has child node %u of %zu", me->index,
                     me->children_swarmx[i], p->n_swarm);
            rc = -EINVAL;
        } else {
            rc = swx_colls__walk(t, k, p, me->children_swarmx[i], seen, stack, why, whylen);
        }
    }
    free(seen);
    free(stack);
    return rc;
}

/* Groups with a replica beneath some child: the keys this node can see. */
static size_t swx_colls__groups(const swx_colls *t)
{
    size_t n = 0;
    for (uint32_t g = 0; g < t->ngroups; g++)
        for (size_t k = 0; k < t->nkids; k++)
            if (swx_colls_in_scope(t, k, g)) {
                n++;
                break;
            }
    return n;
}

int swx_colls_init(swx_colls *t, const Appliance__Plan *p, const Appliance__PlanSwarmNode *me,
                   char *why, size_t whylen)
{
    memset(t, 0, sizeof(*t));
    t->nkids = me->n_children_replicas + me->n_children_swarmx;
    t->ngroups = (uint32_t)(p->n_replicas / msgcheck_parts(p));
    t->row = (t->ngroups + 7) / 8;
    t->beneath = calloc(t->nkids ? t->nkids : 1, t->row ? t->row : 1);
    if (!t->beneath) {
        snprintf(why, whylen, "out of memory");
        return -ENOMEM;
    }
    int rc = swx_colls__fill(t, p, me, why, whylen);
    if (rc == 0) {
        t->limit = SWX_COLL_PENDING_PER_GROUP * swx_colls__groups(t) + SWX_COLL_PENDING_EXTRA;
        if (!(t->pending = calloc(t->limit, sizeof(*t->pending)))) {
            snprintf(why, whylen, "out of memory");
            rc = -ENOMEM;
        }
    }
    if (rc < 0)
        swx_colls_free(t);
    return rc;
}

bool swx_colls_in_scope(const swx_colls *t, size_t k, uint32_t scope)
{
    if (k >= t->nkids)
        return false;
    if (scope == SWX_COLL_ALL)
        return true;
    return scope < t->ngroups && (t->beneath[k * t->row + scope / 8] >> (scope % 8) & 1);
}

static bool swx_colls__same(const swx_coll_key *a, const swx_coll_key *b)
{
    return a->step == b->step && a->tag == b->tag && a->scope == b->scope && a->eval == b->eval;
}

/* "step 5 tag 17 of group 1" (or "of every wse-node", an evaluation's
 * "eval at step 5 ..."), for messages. */
static void swx_colls__name(const swx_coll_key *key, char *out, size_t len)
{
    char scope[32];
    if (key->scope == SWX_COLL_ALL)
        snprintf(scope, sizeof(scope), "every wse-node");
    else
        snprintf(scope, sizeof(scope), "group %u", key->scope);
    snprintf(out, len, "%s %llu tag %u of %s", key->eval ? "eval at step" : "step",
             (unsigned long long)key->step, key->tag, scope);
}

/* The pending key, or a new one (its children in scope counted); NULL with
 * why (-ENOBUFS past the limit, -ENOMEM) in *rc. */
static swx_coll *swx_colls__find(swx_colls *t, const swx_coll_key *key, int *rc, char *why,
                                 size_t whylen)
{
    for (size_t i = 0; i < t->npending; i++)
        if (swx_colls__same(&t->pending[i].key, key))
            return &t->pending[i];
    char name[96];
    if (t->npending == t->limit) {
        swx_colls__name(key, name, sizeof(name));
        snprintf(why, whylen, "%zu collective sums pending (at most %zu) when %s began", t->npending,
                 t->limit, name);
        *rc = -ENOBUFS;
        return NULL;
    }
    swx_coll *c = &t->pending[t->npending];
    memset(c, 0, sizeof(*c));
    if (!(c->parts = calloc(t->nkids, sizeof(*c->parts)))) {
        snprintf(why, whylen, "out of memory");
        *rc = -ENOMEM;
        return NULL;
    }
    c->key = *key;
    for (size_t k = 0; k < t->nkids; k++)
        c->need += swx_colls_in_scope(t, k, key->scope);
    t->npending++;
    return c;
}

/* Adds the contributions element by element in child order into the first
 * one's buffer: the same total whatever order they arrived in. */
static swx_buf *swx_colls__sum(swx_coll *c, size_t nkids)
{
    swx_buf *acc = NULL;
    size_t count = c->len / sizeof(double);
    for (size_t k = 0; k < nkids; k++) {
        swx_buf *b = c->parts[k];
        if (!b)
            continue;
        c->parts[k] = NULL;
        if (!acc) {
            acc = b;
            continue;
        }
        double *d = (double *)acc->data;
        const double *s = (const double *)b->data;
        for (size_t e = 0; e < count; e++)
            d[e] += s[e];
        swx_buf_unref(b);
    }
    return acc;
}

/* Takes the key off the table (its slot goes to the last one's). */
static void swx_colls__drop(swx_colls *t, swx_coll *c)
{
    free(c->parts);
    *c = t->pending[--t->npending];
}

int swx_colls_add(swx_colls *t, const swx_coll_key *key, size_t k, swx_buf *b, swx_buf **sum,
                  char *why, size_t whylen)
{
    char name[96];
    int rc = 0;
    swx_coll *c = NULL;
    if (!swx_colls_in_scope(t, k, key->scope)) {
        swx_colls__name(key, name, sizeof(name));
        snprintf(why, whylen, "child %zu has no replica in the scope of %s", k, name);
        rc = -EPROTO;
    } else if (!(c = swx_colls__find(t, key, &rc, why, whylen))) {
        /* rc and why say why */
    } else if (c->parts[k]) {
        swx_colls__name(key, name, sizeof(name));
        snprintf(why, whylen, "child %zu contributed to %s twice", k, name);
        rc = -EPROTO;
    } else if (c->have > 0 && b->len != c->len) {
        swx_colls__name(key, name, sizeof(name));
        snprintf(why, whylen, "child %zu sent %u doubles to %s, the others %u", k,
                 b->len / (uint32_t)sizeof(double), name, c->len / (uint32_t)sizeof(double));
        rc = -EPROTO;
    }
    if (rc < 0) {
        swx_buf_unref(b);
        return rc;
    }
    c->len = b->len;
    c->parts[k] = b;
    if (++c->have < c->need)
        return 0;
    *sum = swx_colls__sum(c, t->nkids);
    swx_colls__drop(t, c);
    return 1;
}

void swx_colls_free(swx_colls *t)
{
    for (size_t i = 0; i < t->npending; i++) {
        for (size_t k = 0; k < t->nkids; k++)
            swx_buf_unref(t->pending[i].parts[k]);
        free(t->pending[i].parts);
    }
    free(t->pending);
    free(t->beneath);
    memset(t, 0, sizeof(*t));
}
