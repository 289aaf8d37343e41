/* The learning rate a job file's [optimizer] gives at each step named on
 * the command line, one "STEP RATE" line each: what bench/lr_vs_torch.py
 * holds against torch.optim.lr_scheduler.
 *
 *     lr_print JOB.toml STEP... */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobspec.h"
#include "optim.h"

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: lr_print JOB.toml STEP...\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    static char text[1 << 16];
    size_t len = fread(text, 1, sizeof(text), f);
    fclose(f);
    char err[1024];
    jobspec *j = jobspec_parse(text, len, argv[1], ".", err, sizeof(err));
    if (!j) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    optim_config c;
    optim_type type = OPTIM_SGD;
    optim_type_from_name(j->optimizer_type, &type);
    optim_config_defaults(&c, type);
    c.lr = (float)j->learning_rate;
    optim_schedule_from_name(j->lr_schedule, &c.schedule);
    c.warmup_steps = j->warmup_steps;
    c.decay_steps = j->decay_steps ? j->decay_steps : j->max_steps;
    c.end_lr = (float)j->end_learning_rate;
    c.step_size = j->step_size;
    c.gamma = (float)j->gamma;
    c.nsegments = j->n_lr_segments;
    memcpy(c.segments, j->lr_segments, sizeof(c.segments));
    for (int i = 2; i < argc; i++) {
        long long step = atoll(argv[i]);
        printf("%lld %.9g\n", step, optim_lr_at(&c, step));
    }
    jobspec_free(j);
    return 0;
}
