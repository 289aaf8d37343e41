/* delayline: a constant one-way delay for the packets of a netfilter queue,
 * for kernels without netem (tests/cluster/netns-lib.sh).
 *
 *   delayline --queue N --delay-us US [--maxlen N] [--ready-file F] [--realtime P]
 *
 * iptables rules send packets to queue N (-j NFQUEUE --queue-num N
 * --queue-bypass); the delay line binds the queue over raw netlink
 * (NETLINK_NETFILTER, nfnetlink_queue), takes each packet's metadata only
 * (NFQNL_COPY_META: no payload is copied), holds its verdict for US
 * microseconds of CLOCK_MONOTONIC, then accepts it. The delay counts from
 * when the packet entered the queue: the kernel stamps each packet message
 * (NFQA_TIMESTAMP, CLOCK_REALTIME, once any socket asks for receive
 * timestamps, which the delay line does on its own), so the time it takes
 * the delay line to wake up and read the packet is part of the delay, not
 * added to it. Packets a local TCP socket sends carry no stamp (their skb
 * time is TCP's departure time, which the kernel does not pass on): for
 * those it takes the read time less a running average of how long stamped
 * packets took to be read. While it holds stamped packets only, it sleeps
 * until the first is due and reads what came meanwhile then, one wake-up per
 * batch instead of one per packet; so it is cheapest on ingress hooks
 * (PREROUTING), where every packet has a stamp. The delay is the same for
 * every packet, so the queue is a FIFO and one NFQNL_MSG_VERDICT_BATCH
 * accepts every packet whose time has come (a batch verdict covers every
 * queued id up to the one given). GSO packets are queued whole
 * (NFQA_CFG_F_GSO), so a 64 KiB super-packet costs one message and
 * throughput holds; NFQA_CFG_F_FAIL_OPEN accepts packets the queue
 * (--maxlen, default 65536) or the socket has no room for, instead of
 * dropping them. Waits are ppoll() timeouts computed from CLOCK_MONOTONIC
 * with a timer slack of 1 ns; as wake-ups come late (tens of microseconds on
 * a virtual machine or a busy one), it asks to wake that much early: the
 * lead is a running average of how late its timed wake-ups were (at most
 * half the delay), and a packet goes once its due time less the lead has
 * passed, so that on average it goes when due. --realtime P runs it under
 * SCHED_FIFO at priority P (it sleeps but for the moments it reads and
 * releases packets), so that on a busy machine it wakes on time instead of
 * waiting for a CPU; where that is not permitted it says so and goes on at
 * normal priority.
 *
 * Once the queue is bound it prints "delayline: queue N bound, delay US us"
 * on stderr and, with --ready-file, creates F. On SIGTERM or SIGINT it
 * accepts what it still holds, unbinds and prints how long it held packets:
 *   delayline: queue N: P packets, held us: median M p99 Q max X (delay D;
 *   wake-up lead L us; read R us after queueing; U without a kernel stamp)
 * Exit status 0, or 1 with a message naming what failed. */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <linux/netlink.h>
#include <arpa/inet.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef NF_ACCEPT
#define NF_ACCEPT 1
#endif

#define HIST_US 20000           /* hold-time histogram: 1 us buckets up to 20 ms */

typedef struct held {
    uint32_t id;                /* the kernel's packet id */
    uint64_t due_ns;            /* CLOCK_MONOTONIC when it is to be accepted */
    uint64_t in_ns;             /* when it entered the queue */
} held;

typedef struct delayline {
    int fd;
    uint16_t queue;
    uint64_t delay_ns;
    uint32_t maxlen;
    held *ring;                 /* maxlen + 1 slots: the kernel holds at most maxlen */
    size_t cap, head, count;
    uint32_t seq;
    uint64_t packets, unstamped, late_errors, overruns;
    uint64_t *hist;             /* HIST_US + 1 buckets, the last one for longer */
    uint64_t max_hold_ns;
    uint64_t lead_ns;           /* how much earlier than due it asks to wake */
    uint64_t lead_max_ns;
    uint64_t read_lat_ns;       /* running average: queued to read, stamped packets */
    int woke_on_arrival;        /* the last wait was for packets too */
} delayline;

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig) { stop_signal = sig; }

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    fputs("delayline: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A netlink message under construction, nfgenmsg and attributes. */
typedef struct nlbuf {
    union {
        struct nlmsghdr nlh;
        char bytes[256];
    } u;
} nlbuf;

static void nl_start(delayline *d, nlbuf *b, uint16_t type, uint16_t flags)
{
    memset(b, 0, sizeof *b);
    b->u.nlh.nlmsg_len = NLMSG_LENGTH(sizeof(struct nfgenmsg));
    b->u.nlh.nlmsg_type = (uint16_t)((NFNL_SUBSYS_QUEUE << 8) | type);
    b->u.nlh.nlmsg_flags = (uint16_t)(NLM_F_REQUEST | flags);
    b->u.nlh.nlmsg_seq = ++d->seq;
    struct nfgenmsg *g = NLMSG_DATA(&b->u.nlh);
    g->nfgen_family = AF_UNSPEC;
    g->version = NFNETLINK_V0;
    g->res_id = htons(d->queue);
}

static void nl_attr(nlbuf *b, uint16_t type, const void *data, size_t len)
{
    size_t off = NLMSG_ALIGN(b->u.nlh.nlmsg_len);
    size_t alen = NLA_HDRLEN + len;
    if (off + NLA_ALIGN(alen) > sizeof b->u.bytes)
        die("internal error: netlink message too long");
    struct nlattr *a = (struct nlattr *)(b->u.bytes + off);
    a->nla_type = type;
    a->nla_len = (uint16_t)alen;
    memcpy(b->u.bytes + off + NLA_HDRLEN, data, len);
    b->u.nlh.nlmsg_len = (uint32_t)(off + NLA_ALIGN(alen));
}

static int nl_send(delayline *d, nlbuf *b)
{
    struct sockaddr_nl to = { .nl_family = AF_NETLINK };
    ssize_t n = sendto(d->fd, b->u.bytes, b->u.nlh.nlmsg_len, 0, (struct sockaddr *)&to, sizeof to);
    if (n < 0)
        return -errno;
    return 0;
}

/* Sends a configuration message with NLM_F_ACK and waits for its answer:
 * 0 or -errno. Packets that arrive meanwhile are held like any other. */
static void take_packet(delayline *d, const struct nlmsghdr *h, uint64_t now);

static int nl_request(delayline *d, nlbuf *b)
{
    int err = nl_send(d, b);
    if (err)
        return err;
    uint32_t seq = b->u.nlh.nlmsg_seq;
    char buf[8192] __attribute__((aligned(NLMSG_ALIGNTO)));
    for (;;) {
        ssize_t n = recv(d->fd, buf, sizeof buf, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        size_t left = (size_t)n;
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
            if (h->nlmsg_type == NLMSG_ERROR && h->nlmsg_seq == seq) {
                const struct nlmsgerr *e = NLMSG_DATA(h);
                return e->error;
            }
            if (h->nlmsg_type == ((NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET))
                take_packet(d, h, now_ns());
        }
    }
}

static int config(delayline *d, uint8_t cmd)
{
    nlbuf b;
    nl_start(d, &b, NFQNL_MSG_CONFIG, NLM_F_ACK);
    struct nfqnl_msg_config_cmd c = { .command = cmd, .pf = htons(AF_UNSPEC) };
    nl_attr(&b, NFQA_CFG_CMD, &c, sizeof c);
    return nl_request(d, &b);
}

static void bind_queue(delayline *d)
{
    d->fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
    if (d->fd < 0)
        die("cannot open a NETLINK_NETFILTER socket: %s", strerror(errno));
    struct sockaddr_nl me = { .nl_family = AF_NETLINK };
    if (bind(d->fd, (struct sockaddr *)&me, sizeof me) < 0)
        die("cannot bind the netlink socket: %s", strerror(errno));
    /* Room for a burst of packet messages; SO_RCVBUFFORCE needs
     * CAP_NET_ADMIN, which binding a queue needs anyway. */
    int rcv = 16 << 20;
    if (setsockopt(d->fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcv, sizeof rcv) < 0)
        (void)setsockopt(d->fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
    int one = 1;
    (void)setsockopt(d->fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &one, sizeof one);
    /* Any socket with receive timestamps on makes the kernel stamp packets,
     * and so nfnetlink_queue passes NFQA_TIMESTAMP (the cmsgs themselves go
     * unread). */
    (void)setsockopt(d->fd, SOL_SOCKET, SO_TIMESTAMP, &one, sizeof one);

    int err = config(d, NFQNL_CFG_CMD_BIND);
    if (err)
        die("cannot bind queue %u: %s%s", d->queue, strerror(-err),
            err == -EPERM ? " (it takes CAP_NET_ADMIN, and a queue no other process holds)" : "");

    nlbuf b;
    nl_start(d, &b, NFQNL_MSG_CONFIG, NLM_F_ACK);
    struct nfqnl_msg_config_params p = { .copy_range = htonl(0), .copy_mode = NFQNL_COPY_META };
    nl_attr(&b, NFQA_CFG_PARAMS, &p, sizeof p);
    uint32_t maxlen = htonl(d->maxlen);
    nl_attr(&b, NFQA_CFG_QUEUE_MAXLEN, &maxlen, sizeof maxlen);
    uint32_t flags = htonl(NFQA_CFG_F_GSO | NFQA_CFG_F_FAIL_OPEN);
    nl_attr(&b, NFQA_CFG_FLAGS, &flags, sizeof flags);
    nl_attr(&b, NFQA_CFG_MASK, &flags, sizeof flags);
    err = nl_request(d, &b);
    if (err)
        die("cannot configure queue %u (metadata copy, GSO, fail-open, maxlen %u): %s",
            d->queue, d->maxlen, strerror(-err));
}

/* Accepts every held packet due by `now` plus the wake-up lead (all of them
 * with flush) with one batch verdict. */
static void release(delayline *d, uint64_t now, int flush)
{
    size_t n = 0;
    while (n < d->count) {
        const held *h = &d->ring[(d->head + n) % d->cap];
        if (!flush && h->due_ns > now + d->lead_ns)
            break;
        n++;
    }
    if (n == 0)
        return;
    const held *last = &d->ring[(d->head + n - 1) % d->cap];
    nlbuf b;
    nl_start(d, &b, NFQNL_MSG_VERDICT_BATCH, 0);
    struct nfqnl_msg_verdict_hdr v = { .verdict = htonl(NF_ACCEPT), .id = htonl(last->id) };
    nl_attr(&b, NFQA_VERDICT_HDR, &v, sizeof v);
    int err;
    while ((err = nl_send(d, &b)) == -EINTR)
        ;
    if (err)
        die("cannot send a verdict on queue %u: %s", d->queue, strerror(-err));
    uint64_t t = now_ns();
    for (size_t i = 0; i < n; i++) {
        const held *h = &d->ring[(d->head + i) % d->cap];
        uint64_t hold = t - h->in_ns;
        if (hold > d->max_hold_ns)
            d->max_hold_ns = hold;
        uint64_t us = hold / 1000;
        d->hist[us < HIST_US ? us : HIST_US]++;
    }
    d->head = (d->head + n) % d->cap;
    d->count -= n;
}

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Takes the packet of one NFQNL_MSG_PACKET read at `now`
 * (CLOCK_MONOTONIC); its kernel stamp, when it has one, says when it was
 * queued. */
static void take_packet(delayline *d, const struct nlmsghdr *h, uint64_t now)
{
    uint64_t real_now = realtime_ns();
    int have_id = 0;
    uint32_t id = 0;
    uint64_t in = now;
    int stamped = 0;
    size_t len = h->nlmsg_len;
    if (len < NLMSG_LENGTH(sizeof(struct nfgenmsg)))
        return;
    size_t off = NLMSG_LENGTH(sizeof(struct nfgenmsg));
    off = NLMSG_ALIGN(off);
    const char *base = (const char *)h;
    while (off + NLA_HDRLEN <= len) {
        const struct nlattr *a = (const struct nlattr *)(base + off);
        if (a->nla_len < NLA_HDRLEN || off + a->nla_len > len)
            break;
        uint16_t type = a->nla_type & NLA_TYPE_MASK;
        if (type == NFQA_PACKET_HDR && a->nla_len >= NLA_HDRLEN + sizeof(struct nfqnl_msg_packet_hdr)) {
            struct nfqnl_msg_packet_hdr ph;
            memcpy(&ph, base + off + NLA_HDRLEN, sizeof ph);
            id = ntohl(ph.packet_id);
            have_id = 1;
        } else if (type == NFQA_TIMESTAMP &&
                   a->nla_len >= NLA_HDRLEN + sizeof(struct nfqnl_msg_packet_timestamp)) {
            struct nfqnl_msg_packet_timestamp ts;
            memcpy(&ts, base + off + NLA_HDRLEN, sizeof ts);
            uint64_t stamp = be64toh(ts.sec) * 1000000000u + be64toh(ts.usec) * 1000u;
            /* Queued `real_now - stamp` ago; a stamp from the future or
             * from more than a second ago (the clock was set) is not used. */
            if (stamp <= real_now && real_now - stamp < 1000000000u && real_now - stamp <= now) {
                uint64_t lat = real_now - stamp;
                in = now - lat;
                stamped = 1;
                if (d->woke_on_arrival) {
                    int64_t avg = (int64_t)d->read_lat_ns + ((int64_t)lat - (int64_t)d->read_lat_ns) / 16;
                    d->read_lat_ns = avg < 0 ? 0 : (uint64_t)avg;
                }
            }
        }
        off += NLA_ALIGN(a->nla_len);
    }
    if (!have_id)
        return;
    if (!stamped) {
        uint64_t lat = d->read_lat_ns < d->delay_ns / 2 ? d->read_lat_ns : d->delay_ns / 2;
        in = now > lat ? now - lat : now;
    }
    if (d->count == d->cap) {
        /* Cannot happen while the kernel keeps to maxlen; accept
         * everything rather than lose track. */
        d->overruns++;
        release(d, now, 1);
    }
    held *slot = &d->ring[(d->head + d->count) % d->cap];
    slot->id = id;
    slot->in_ns = in;
    /* FIFO: never due before the packet ahead of it (stamps are in
     * microseconds and from two hooks). */
    slot->due_ns = in + d->delay_ns;
    if (d->count > 0) {
        const held *prev = &d->ring[(d->head + d->count - 1) % d->cap];
        if (slot->due_ns < prev->due_ns)
            slot->due_ns = prev->due_ns;
    }
    d->count++;
    d->packets++;
    if (!stamped)
        d->unstamped++;
}

/* Reads every message waiting on the socket. */
static void drain(delayline *d, char *buf, size_t size)
{
    for (;;) {
        ssize_t n = recv(d->fd, buf, size, MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return;
            if (errno == ENOBUFS) { /* messages lost: fail-open accepted those packets */
                d->overruns++;
                continue;
            }
            die("cannot read from queue %u: %s", d->queue, strerror(errno));
        }
        uint64_t now = now_ns();
        size_t left = (size_t)n;
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
            if (h->nlmsg_type == NLMSG_ERROR) {
                const struct nlmsgerr *e = NLMSG_DATA(h);
                if (e->error != 0 && d->late_errors++ < 5)
                    fprintf(stderr, "delayline: queue %u: the kernel refused a verdict: %s\n",
                            d->queue, strerror(-e->error));
            } else if (h->nlmsg_type == ((NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET)) {
                take_packet(d, h, now);
            }
        }
    }
}

static uint64_t percentile_us(const delayline *d, double q)
{
    uint64_t total = 0;
    for (size_t i = 0; i <= HIST_US; i++)
        total += d->hist[i];
    if (total == 0)
        return 0;
    uint64_t want = (uint64_t)(q * (double)(total - 1)) + 1, seen = 0;
    for (size_t i = 0; i <= HIST_US; i++) {
        seen += d->hist[i];
        if (seen >= want)
            return i;
    }
    return HIST_US;
}

static unsigned long parse_num(const char *what, const char *s, unsigned long min, unsigned long max)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v < min || v > max)
        die("bad %s '%s': want an integer from %lu to %lu", what, s, min, max);
    return v;
}

static void usage(FILE *f)
{
    fputs("usage: delayline --queue N --delay-us US [--maxlen N] [--ready-file F] [--realtime P]\n"
          "Holds every packet of netfilter queue N for US microseconds, then accepts it.\n", f);
}

int main(int argc, char **argv)
{
    delayline d = { .fd = -1, .maxlen = 65536 };
    long queue = -1, delay_us = -1, rtprio = 0;
    const char *ready = NULL;
    static const struct option opts[] = {
        { "queue", required_argument, NULL, 'q' },
        { "delay-us", required_argument, NULL, 'd' },
        { "maxlen", required_argument, NULL, 'm' },
        { "ready-file", required_argument, NULL, 'r' },
        { "realtime", required_argument, NULL, 'R' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int c;
    while ((c = getopt_long(argc, argv, "q:d:m:r:R:h", opts, NULL)) != -1) {
        switch (c) {
        case 'q': queue = (long)parse_num("queue number", optarg, 0, 65535); break;
        case 'd': delay_us = (long)parse_num("delay (--delay-us)", optarg, 0, 10000000); break;
        case 'm': d.maxlen = (uint32_t)parse_num("queue length (--maxlen)", optarg, 1, 1u << 20); break;
        case 'r': ready = optarg; break;
        case 'R': rtprio = (long)parse_num("priority (--realtime)", optarg, 1, 99); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 1;
        }
    }
    if (optind < argc)
        die("unexpected argument '%s'", argv[optind]);
    if (queue < 0 || delay_us < 0) {
        usage(stderr);
        die("--queue and --delay-us are required");
    }
    d.queue = (uint16_t)queue;
    d.delay_ns = (uint64_t)delay_us * 1000;
    d.cap = (size_t)d.maxlen + 1;
    d.ring = calloc(d.cap, sizeof *d.ring);
    d.hist = calloc(HIST_US + 1, sizeof *d.hist);
    size_t bufsize = 1 << 16;
    char *buf = malloc(bufsize);
    if (!d.ring || !d.hist || !buf)
        die("out of memory for a queue of %u packets", d.maxlen);

    /* Timer slack of 1 ns: ppoll's timeouts end on time, not up to 50 us late. */
    (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);

    /* SIGTERM and SIGINT are blocked except inside ppoll, so a signal is
     * never lost between the check of stop_signal and the wait. */
    struct sigaction sa = { .sa_handler = on_signal };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigset_t block, waitmask;
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    sigprocmask(SIG_BLOCK, &block, &waitmask);
    sigdelset(&waitmask, SIGTERM);
    sigdelset(&waitmask, SIGINT);

    if (rtprio > 0) {
        struct sched_param sp = { .sched_priority = (int)rtprio };
        if (sched_setscheduler(0, SCHED_FIFO, &sp) < 0)
            fprintf(stderr, "delayline: cannot run under SCHED_FIFO priority %ld: %s; "
                    "going on at normal priority\n", rtprio, strerror(errno));
    }

    bind_queue(&d);
    fprintf(stderr, "delayline: queue %u bound, delay %ld us\n", d.queue, delay_us);
    if (ready) {
        int rfd = open(ready, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (rfd < 0)
            die("cannot create the ready file %s: %s", ready, strerror(errno));
        close(rfd);
    }

    d.lead_max_ns = d.delay_ns / 2;
    struct pollfd pfd = { .fd = d.fd, .events = POLLIN };
    d.woke_on_arrival = 1;
    while (!stop_signal) {
        drain(&d, buf, bufsize);
        uint64_t now = now_ns();
        release(&d, now, 0);
        struct timespec ts, *tmo = NULL;
        uint64_t wake = 0;
        if (d.count > 0) {
            uint64_t due = d.ring[d.head].due_ns;
            wake = due > d.lead_ns ? due - d.lead_ns : 0;
            now = now_ns();
            uint64_t wait = wake > now ? wake - now : 0;
            ts.tv_sec = (time_t)(wait / 1000000000u);
            ts.tv_nsec = (long)(wait % 1000000000u);
            tmo = &ts;
        }
        /* While it holds packets it need not wake for new ones when they
         * carry kernel stamps: they are due after the one it waits for, and
         * are read then. An unstamped packet needs reading on arrival (its
         * time is the read time), so once there has been one it does. */
        pfd.events = (d.count == 0 || d.unstamped) ? POLLIN : 0;
        d.woke_on_arrival = pfd.events != 0;
        int r = ppoll(&pfd, 1, tmo, &waitmask);
        if (r < 0 && errno != EINTR)
            die("cannot wait on queue %u: %s", d.queue, strerror(errno));
        if (r == 0 && tmo) { /* a timed wake-up: how late was it? */
            now = now_ns();
            int64_t late = now > wake ? (int64_t)(now - wake) : 0;
            int64_t lead = (int64_t)d.lead_ns + (late - (int64_t)d.lead_ns) / 8;
            if (lead < 0)
                lead = 0;
            d.lead_ns = (uint64_t)lead > d.lead_max_ns ? d.lead_max_ns : (uint64_t)lead;
        }
    }

    /* Leaving: what is held goes now, then the queue is unbound (with
     * --queue-bypass the rules then let packets through). */
    drain(&d, buf, bufsize);
    release(&d, now_ns(), 1);
    int err = config(&d, NFQNL_CFG_CMD_UNBIND);
    if (err)
        fprintf(stderr, "delayline: cannot unbind queue %u: %s\n", d.queue, strerror(-err));
    fprintf(stderr, "delayline: queue %u: %" PRIu64 " packets, held us: median %" PRIu64
            " p99 %" PRIu64 " max %" PRIu64 " (delay %ld; wake-up lead %" PRIu64
            " us; read %" PRIu64 " us after queueing; %" PRIu64 " without a kernel stamp)%s\n",
            d.queue, d.packets, percentile_us(&d, 0.5), percentile_us(&d, 0.99),
            d.max_hold_ns / 1000, delay_us, d.lead_ns / 1000, d.read_lat_ns / 1000, d.unstamped,
            d.overruns ? " (the queue or the socket overflowed: some packets went undelayed)" : "");
    close(d.fd);
    free(d.ring);
    free(d.hist);
    free(buf);
    return 0;
}
