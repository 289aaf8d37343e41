/* swarmx: a node of the weight broadcast / gradient reduce tree. */
#include "swx.h"

int main(int argc, char **argv)
{
    static node_role role;
    static node n;
    static swarmx s;
    swarmx_role(&role, &s, &n);
    node_parse_args(&n.opt, &role, argc, argv);
    n.data = &s;
    return node_run(&n, &role, uv_default_loop());
}
