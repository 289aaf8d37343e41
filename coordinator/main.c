/* coordinator: membership, jobs, the compiler and the job driver. */
#include <uv.h>

#include "coordinator.h"
#include "log.h"
#include "users.h"
#include "web.h"

static web *main__web;
static void (*main__role_shutdown)(node *n);

/* The role's shutdown, and the web page's listener with it. */
static void main__shutdown(node *n)
{
    web_stop(main__web);
    main__web = NULL;
    main__role_shutdown(n);
}

int main(int argc, char **argv)
{
    static node_role role;
    static node n;
    static coordinator co;
    coordinator_role(&role, &co.opt);
    node_parse_args(&n.opt, &role, argc, argv);
    n.data = &co;
    uv_loop_t *loop = uv_default_loop();
    n.loop = loop;
    log_init(role.component, (enum log_level)n.opt.log_level); /* the journal logs as it loads */
    users *u = NULL;
    if (co.opt.users_file[0]) {
        char err[1024];
        if (!(u = users_load(co.opt.users_file, err, sizeof(err)))) {
            log_error("%s", err);
            return 1;
        }
        n.user_key = users_key;
        n.user_key_arg = u;
        log_info("users file %s: %zu user(s), each sees only their own jobs; clients holding the "
                 "cluster secret are operators and see every job", co.opt.users_file,
                 users_count(u));
    }
    n.reply_backlog = co.opt.admission.max_client_backlog;
    coordinator_init(&co, &n);
    if (co.opt.http[0]) {
        char err[512];
        int port;
        if (!(main__web = web_start(&co, u, co.opt.http, &port, err, sizeof(err)))) {
            log_error("%s", err);
            return 1;
        }
        char host[64];
        int unused;
        conn_addr_parse(co.opt.http, host, sizeof(host), &unused);
        log_info("web page at http://%s:%d/", host, port);
        main__role_shutdown = role.on_shutdown;
        role.on_shutdown = main__shutdown;
    }
    int rc = node_run(&n, &role, loop);
    members_deinit(&co.members);
    users_free(u);
    return rc;
}
