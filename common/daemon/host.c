/* The host's identity and memory, read once at start-up (node_parse_args). */
#include "host.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

/* The first line of a small file, without surrounding blanks, into out;
 * 0 when it has one that is not empty. */
static int host__first_line(const char *path, char *out, size_t len)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -errno;
    char line[256];
    char *s = fgets(line, sizeof(line), f);
    fclose(f);
    if (!s)
        return -ENODATA;
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = 0;
    if (n == 0 || n >= len)
        return -ENODATA;
    memcpy(out, s, n + 1);
    return 0;
}

int host_identity(char *id, size_t len)
{
    if (host__first_line("/proc/sys/kernel/random/boot_id", id, len) == 0 ||
        host__first_line("/etc/machine-id", id, len) == 0)
        return 0;
    char name[256];
    if (gethostname(name, sizeof(name)) < 0)
        return -errno;
    name[sizeof(name) - 1] = 0;
    if (!name[0] || strlen(name) >= len)
        return -ENODATA;
    strcpy(id, name);
    return 0;
}

uint64_t host_cgroup_limit(const char *root, const char *cgroup_text)
{
    /* cgroup v2: the one line "0::/path" */
    const char *line = cgroup_text;
    while (line && strncmp(line, "0::", 3) != 0) {
        line = strchr(line, '\n');
        if (line)
            line++;
    }
    if (!line)
        return UINT64_MAX;
    char path[PATH_MAX];
    size_t n = strcspn(line + 3, "\n");
    if (n >= sizeof(path))
        return UINT64_MAX;
    memcpy(path, line + 3, n);
    path[n] = 0;
    uint64_t limit = UINT64_MAX;
    for (;;) {
        /* the cgroup at path, then each ancestor: "/" is the tree's root
         * as this process sees it (a container's own cgroup) */
        char file[PATH_MAX + 64], text[64];
        int k = snprintf(file, sizeof(file), "%s%s/memory.max", root,
                         strcmp(path, "/") == 0 ? "" : path);
        if (k > 0 && (size_t)k < sizeof(file) && host__first_line(file, text, sizeof(text)) == 0 &&
            isdigit((unsigned char)text[0])) {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(text, &end, 10);
            if (errno == 0 && *end == 0 && v < limit)
                limit = v;
        }
        char *slash = strrchr(path, '/');
        if (!slash || strcmp(path, "/") == 0)
            break;
        if (slash == path)
            strcpy(path, "/");
        else
            *slash = 0;
    }
    return limit;
}

uint64_t host_memory(void)
{
    uint64_t mem = uv_get_total_memory();
    uint64_t v1 = uv_get_constrained_memory(); /* cgroup v1's limit, where libuv reads it */
    if (v1 && v1 < mem)
        mem = v1;
    char text[4096];
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (f) {
        size_t n = fread(text, 1, sizeof(text) - 1, f);
        fclose(f);
        text[n] = 0;
        uint64_t v2 = host_cgroup_limit("/sys/fs/cgroup", text);
        if (v2 < mem)
            mem = v2;
    }
    return mem;
}

int host_share_parse(const char *s, double *share)
{
    char *end;
    errno = 0;
    double f = strtod(s, &end);
    if (errno || end == s || !(f > 0 && f <= 1))
        return -EINVAL;
    if (*end == '/') {
        const char *d = end + 1;
        if (!isdigit((unsigned char)*d))
            return -EINVAL;
        unsigned long k = strtoul(d, &end, 10);
        if (errno || k == 0 || k > 1000000)
            return -EINVAL;
        f /= (double)k;
    }
    if (*end)
        return -EINVAL;
    *share = f;
    return 0;
}
