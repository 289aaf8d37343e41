/* Members grouped by host, their memory summed per host. Hosts and members
 * are few (tens), so linear scans are right. */
#include "hosts.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "units.h"

static bool hosts__live(const member *mb)
{
    return mb->state == APPLIANCE__MEMBER_STATE__MEMBER_ALIVE ||
           mb->state == APPLIANCE__MEMBER_STATE__MEMBER_BUSY;
}

/* Whether a and b run on one known host. */
static bool hosts__same(const member *a, const member *b)
{
    return a->host_id[0] && strcmp(a->host_id, b->host_id) == 0;
}

/* Appends to out (len bytes) at *at; a line cut short stays terminated. */
static void hosts__add(char *out, size_t len, size_t *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void hosts__add(char *out, size_t len, size_t *at, const char *fmt, ...)
{
    if (*at >= len)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(out + *at, len - *at, fmt, ap);
    va_end(ap);
    if (k > 0)
        *at = *at + (size_t)k < len ? *at + (size_t)k : len - 1;
}

const char *hosts_label(const member *mb, char *buf, size_t len)
{
    const char *id = mb->host_id;
    if (!id[0]) {
        snprintf(buf, len, "(unknown host)");
        return buf;
    }
    /* a boot id or machine id: its first 8 hex digits tell hosts apart */
    bool hex = strlen(id) >= 32;
    for (int i = 0; hex && i < 8; i++)
        hex = isxdigit((unsigned char)id[i]);
    int idlen = hex ? 8 : (int)strlen(id);
    if (!mb->host_name[0] || strcmp(mb->host_name, id) == 0)
        snprintf(buf, len, "%.*s", idlen, id);
    else
        snprintf(buf, len, "%s (%.*s)", mb->host_name, idlen, id);
    return buf;
}

uint64_t hosts_declared_bytes(const member *mb)
{
    if (mb->role == APPLIANCE__ROLE__ROLE_WSE_NODE)
        return mb->simulated ? 0 : mb->wafer_memory; /* a simulated one fills no wafer */
    if (mb->role == APPLIANCE__ROLE__ROLE_MEMORYX && mb->host_memory && mb->memory != mb->host_memory)
        return mb->memory; /* its --memory: without one it offers the host's */
    return 0;
}

#define HOSTS_LISTED 8 /* members a line names; the rest are counted */

bool hosts_declared_over(const members *m, const member *mb, char *out, size_t len)
{
    if (!mb->host_id[0])
        return false;
    uint64_t mem = 0, total = 0;
    size_t count = 0;
    for (size_t i = 0; i < m->n; i++) {
        const member *o = &m->v[i];
        if (!hosts__live(o) || !hosts__same(o, mb))
            continue;
        if (o->host_memory > mem)
            mem = o->host_memory;
        uint64_t b = hosts_declared_bytes(o);
        total += b;
        count += b > 0;
    }
    if (!mem || total <= mem)
        return false;
    char label[160], a[32], b[32];
    size_t at = 0;
    hosts__add(out, len, &at, "host %s has %s and its members declare %s:", hosts_label(mb, label, sizeof(label)),
               units_format_size(mem, a, sizeof(a)), units_format_size(total, b, sizeof(b)));
    size_t listed = 0;
    for (size_t i = 0; i < m->n && listed < HOSTS_LISTED; i++) {
        const member *o = &m->v[i];
        uint64_t d = hosts__live(o) && hosts__same(o, mb) ? hosts_declared_bytes(o) : 0;
        if (!d)
            continue;
        hosts__add(out, len, &at, "%s %s %s of %s", listed ? "," : "", o->name,
                   units_format_size(d, a, sizeof(a)),
                   o->role == APPLIANCE__ROLE__ROLE_WSE_NODE ? "wafer memory" : "memory (--memory)");
        listed++;
    }
    if (count > listed)
        hosts__add(out, len, &at, " and %zu more", count - listed);
    hosts__add(out, len, &at, "; jobs are planned within the host's %s, but give its wse-nodes "
               "--wafer-memory (or --wafer-share) adding up to less than it has",
               units_format_size(mem, a, sizeof(a)));
    return true;
}

/* What the members of one role on a host hold, in a plan. */
typedef struct hosts__role {
    size_t n;                    /* members of the role on the host */
    size_t simulated;            /* of them, wse-nodes that simulate their compute */
    uint64_t bytes;              /* what they hold together */
    uint64_t largest, smallest;  /* what one of them holds at most, at least */
} hosts__role;

static int hosts__role_index(Appliance__Role r)
{
    switch (r) {
    case APPLIANCE__ROLE__ROLE_WSE_NODE: return 0;
    case APPLIANCE__ROLE__ROLE_MEMORYX: return 1;
    case APPLIANCE__ROLE__ROLE_SWARMX: return 2;
    case APPLIANCE__ROLE__ROLE_WORKER: return 3;
    default: return -1;
    }
}

/* "2 wse-nodes plan 15.5 GiB each, memoryx holds 12.0 MiB, ..." */
static void hosts__describe(const hosts__role *r, char *out, size_t len, size_t *at)
{
    char a[32], b[32];
    bool first = true;
    for (int k = 0; k < 4; k++) {
        if (!r[k].n)
            continue;
        const char *sep = first ? "" : ", ";
        first = false;
        units_format_size(r[k].bytes, a, sizeof(a));
        bool one = r[k].n == 1;
        /* simulated wse-nodes hold their slots and batches, no activation */
        const char *sim = r[k].simulated == r[k].n ? "simulated " : "";
        switch (k) {
        case 0:
            if (one)
                hosts__add(out, len, at, "%s1 %swse-node plans %s", sep, sim, a);
            else if (r[k].largest == r[k].smallest)
                hosts__add(out, len, at, "%s%zu %swse-nodes plan %s each", sep, r[k].n, sim,
                           units_format_size(r[k].largest, b, sizeof(b)));
            else
                hosts__add(out, len, at, "%s%zu %swse-nodes plan %s (up to %s each)", sep, r[k].n,
                           sim, a, units_format_size(r[k].largest, b, sizeof(b)));
            break;
        case 1:
            if (one)
                hosts__add(out, len, at, "%smemoryx holds %s", sep, a);
            else
                hosts__add(out, len, at, "%s%zu memoryx hold %s", sep, r[k].n, a);
            break;
        case 2:
            if (one)
                hosts__add(out, len, at, "%sswarmx buffers up to %s", sep, a);
            else
                hosts__add(out, len, at, "%s%zu swarmx buffer up to %s", sep, r[k].n, a);
            break;
        default:
            hosts__add(out, len, at, "%s%zu worker%s hold%s %s of batches", sep, r[k].n,
                       one ? "" : "s", one ? "s" : "", a);
        }
    }
}

int hosts_check_plan(const hosts_use *use, size_t n, uint64_t *share, char *err, size_t errlen)
{
    int over = 0;
    *share = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        const member *h = use[i].mb;
        bool seen = !h->host_id[0];
        for (size_t j = 0; j < i && !seen; j++)
            seen = hosts__same(use[j].mb, h);
        if (seen)
            continue;
        hosts__role r[4];
        memset(r, 0, sizeof(r));
        uint64_t mem = 0, total = 0;
        for (size_t j = i; j < n; j++) {
            const member *o = use[j].mb;
            int k = hosts__role_index(o->role);
            if (!hosts__same(o, h) || k < 0 || !use[j].bytes)
                continue;
            if (o->host_memory > mem)
                mem = o->host_memory;
            uint64_t b = use[j].bytes;
            total += b;
            r[k].bytes += b;
            if (!r[k].n || b > r[k].largest)
                r[k].largest = b;
            if (!r[k].n || b < r[k].smallest)
                r[k].smallest = b;
            r[k].n++;
            r[k].simulated += o->simulated;
        }
        if (!mem || total <= mem)
            continue;
        uint64_t others = total - r[0].bytes;
        uint64_t s = r[0].n && mem > others ? (mem - others) / r[0].n : 0;
        if (s < *share)
            *share = s;
        if (over++)
            continue;
        char label[160], a[32], b[32];
        size_t at = 0;
        hosts__add(err, errlen, &at, "host %s has %s and the job's members on it need %s: ",
                   hosts_label(h, label, sizeof(label)), units_format_size(mem, a, sizeof(a)),
                   units_format_size(total, b, sizeof(b)));
        hosts__describe(r, err, errlen, &at);
    }
    if (!over)
        *share = 0;
    return over ? 1 : 0;
}
