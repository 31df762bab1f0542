/*
 * mpi_bench.c: the standard workloads of starbench (cmd/starbench) on
 * MPI, for bench/compare-mpi.sh.
 *
 * Usage: mpirun -np R mpi_bench [REPEATS_SCALE [WORKLOADS]]
 *
 * Same sizes, repeats, values, verification and timing as
 * cmd/starbench/workloads.go and runner.go:
 *
 *   per workload: allocate, then repetition 0 (untimed warm-up) and
 *   repetitions 1..repeats, each: fill the send buffers from rank and
 *   repetition (untimed); MPI_Barrier; time the operation with MPI_Wtime;
 *   MPI_Allreduce(MAX) of the ranks' times in seconds (untimed); check
 *   every received element (untimed). Reported: the median (mean of the
 *   two middle values for an even count, truncated to whole ns, like Go's
 *   Duration arithmetic), minimum and maximum of the slowest rank's times.
 *
 * REPEATS_SCALE multiplies every workload's repeats, rounding half away
 * from zero, at least 1 (starbench's --repeats-scale). WORKLOADS is a
 * comma-separated list of workload names, run in that order (starbench's
 * --workloads); without it the standard ones run. allreduce-64MiB runs
 * only when named, as in starbench.
 *
 * Rank 0 prints one line per workload on standard output:
 *
 *   <workload> <median_ns> <min_ns> <max_ns> <repeats>
 *
 * preceded by comment lines starting with '#'. A verification failure
 * prints a message naming the workload, rank, repetition, buffer, index,
 * value received and expected, and aborts the job with exit status 1.
 */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    CUT_VALUES = 25000,       /* one rank's cuts of one stage: 200 KB */
    TRIAL_VALUES = 262144,    /* one rank's trial points: 2 MiB */
    BIG_VALUES = 2097152,     /* 16 MiB */
    BIG_REDUCE_VALUES = 8388608, /* 64 MiB */
    ALLREDUCE_VALUES = 4,     /* 32 B */
    BROADCAST_BYTES = 10240,  /* 10 KiB of uint8 */
    CUTS_PER_ITER = 119,      /* cut allgathervs in one SDDP iteration */
    UPPER_BOUND_STATS = 3,    /* values of the sddp-iteration sum */
};

static int g_rank, g_size;

/* ---------- values (cmd/starbench/workloads.go) ---------- */

/* value is the float64 that rank sends as element key of repetition rep. */
static double value(int rep, int rank, int key) {
    uint64_t v = ((uint64_t)(rep & 0xfff) << 40) | ((uint64_t)(rank & 0xffff) << 24) |
                 (uint64_t)(key & 0xffffff);
    return (double)v;
}

/* sendValue is what rank sends as element i of repetition rep of a reduce. */
static double send_value(int rep, int rank, int i) {
    return (double)(rank + 1) * (double)(i + 1) + (double)(rep & 0xfff) * 0.25;
}

/* bcastByte is element i of root's buffer in repetition rep. */
static uint8_t bcast_byte(int rep, int root, int i) {
    return (uint8_t)(rep * 13 + root * 29 + i * 7 + 1);
}

static int same_bits(double a, double b) {
    uint64_t x, y;
    memcpy(&x, &a, sizeof x);
    memcpy(&y, &b, sizeof y);
    return x == y;
}

static void *xmalloc(size_t n) {
    void *p = malloc(n);
    if (p == NULL) {
        fprintf(stderr, "mpi_bench: rank %d: out of memory allocating %zu bytes\n", g_rank, n);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return p;
}

static void verify_failed(const char *workload, int rep, const char *buffer, long index,
                          const char *got, const char *want) {
    char r[32];
    if (rep == 0)
        snprintf(r, sizeof r, "0 (warm-up)");
    else
        snprintf(r, sizeof r, "%d", rep);
    fprintf(stderr,
            "mpi_bench: verification failed: workload %s, rank %d, repetition %s: %s[%ld] = %s, want %s\n",
            workload, g_rank, r, buffer, index, got, want);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static void verify_failed_f(const char *workload, int rep, const char *buffer, long index,
                            double got, double want) {
    char g[64], w[64];
    snprintf(g, sizeof g, "%.17g", got);
    snprintf(w, sizeof w, "%.17g", want);
    verify_failed(workload, rep, buffer, index, g, w);
}

/* ---------- allgatherv of count doubles per rank ---------- */

typedef struct {
    int count, tag;
    double *send, *recv;
    int *counts, *displs;
} gather;

static void gather_init(gather *g, int count, int tag) {
    g->count = count;
    g->tag = tag;
    g->send = xmalloc((size_t)count * sizeof(double));
    g->recv = xmalloc((size_t)count * (size_t)g_size * sizeof(double));
    g->counts = xmalloc((size_t)g_size * sizeof(int));
    g->displs = xmalloc((size_t)g_size * sizeof(int));
    for (int r = 0; r < g_size; r++) {
        g->counts[r] = count;
        g->displs[r] = r * count;
    }
    /* Touch recv so its pages exist before the warm-up. */
    memset(g->recv, 0, (size_t)count * (size_t)g_size * sizeof(double));
}

static void gather_free(gather *g) {
    free(g->send);
    free(g->recv);
    free(g->counts);
    free(g->displs);
}

static void gather_fill(gather *g, int rep) {
    int base = g->tag * g->count;
    for (int i = 0; i < g->count; i++)
        g->send[i] = value(rep, g_rank, base + i);
}

static void gather_run(gather *g) {
    MPI_Allgatherv(g->send, g->count, MPI_DOUBLE, g->recv, g->counts, g->displs, MPI_DOUBLE,
                   MPI_COMM_WORLD);
}

static void gather_check(gather *g, int rep, const char *workload, const char *buffer) {
    int base = g->tag * g->count;
    for (int r = 0; r < g_size; r++) {
        const double *part = g->recv + g->displs[r];
        for (int i = 0; i < g->count; i++) {
            double want = value(rep, r, base + i);
            if (!same_bits(part[i], want))
                verify_failed_f(workload, rep, buffer, (long)g->displs[r] + i, part[i], want);
        }
    }
}

/* ---------- float64 allreduce ---------- */

typedef struct {
    MPI_Op op; /* MPI_SUM or MPI_MIN */
    int n;
    const char *name;
    double *send, *recv;
} reduce;

static void reduce_init(reduce *c, MPI_Op op, int n, const char *name) {
    c->op = op;
    c->n = n;
    c->name = name;
    c->send = xmalloc((size_t)n * sizeof(double));
    c->recv = xmalloc((size_t)n * sizeof(double));
}

static void reduce_free(reduce *c) {
    free(c->send);
    free(c->recv);
}

static void reduce_fill(reduce *c, int rep) {
    for (int i = 0; i < c->n; i++)
        c->send[i] = send_value(rep, g_rank, i);
}

static void reduce_run(reduce *c) {
    MPI_Allreduce(c->send, c->recv, c->n, MPI_DOUBLE, c->op, MPI_COMM_WORLD);
}

/* The values are small multiples of 0.25, so every summation order gives
 * the same bits as starbench's rank-order reduction. */
static void reduce_check(reduce *c, int rep, const char *workload) {
    for (int i = 0; i < c->n; i++) {
        double acc = send_value(rep, 0, i);
        for (int r = 1; r < g_size; r++) {
            double v = send_value(rep, r, i);
            if (c->op == MPI_MIN)
                acc = v < acc ? v : acc;
            else
                acc += v;
        }
        if (!same_bits(c->recv[i], acc))
            verify_failed_f(workload, rep, c->name, i, c->recv[i], acc);
    }
}

/* ---------- workloads ---------- */

typedef enum { W_GATHER, W_SUM, W_BARRIER, W_BCAST, W_SDDP } kind;

typedef struct {
    const char *name;
    kind kind;
    int values; /* W_GATHER: values per rank */
    int repeats;
    int named_only; /* runs only when WORKLOADS names it */
} workload;

static const workload workloads[] = {
    {"allgatherv-cuts", W_GATHER, CUT_VALUES, 50, 0},
    {"allgatherv-2MiB", W_GATHER, TRIAL_VALUES, 20, 0},
    {"allgatherv-16MiB", W_GATHER, BIG_VALUES, 8, 0},
    {"allreduce-32B", W_SUM, ALLREDUCE_VALUES, 200, 0},
    {"barrier", W_BARRIER, 0, 200, 0},
    {"broadcast-10KB", W_BCAST, BROADCAST_BYTES, 200, 0},
    {"sddp-iteration", W_SDDP, 0, 3, 0},
    {"allreduce-64MiB", W_SUM, BIG_REDUCE_VALUES, 5, 1},
};

enum { NWORKLOADS = sizeof workloads / sizeof workloads[0] };

/* find_workload returns the workload called name (len bytes), or NULL. */
static const workload *find_workload(const char *name, size_t len) {
    for (size_t i = 0; i < NWORKLOADS; i++)
        if (strlen(workloads[i].name) == len && strncmp(workloads[i].name, name, len) == 0)
            return &workloads[i];
    return NULL;
}

/* select_workloads parses a comma-separated list into out (at most max
 * entries) and returns how many it holds, or -1 after printing (on rank
 * 0) a message that names what was wrong. */
static int select_workloads(const char *list, const workload **out, int max) {
    int n = 0;
    const char *p = list;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
        const workload *w = find_workload(p, len);
        if (w == NULL || n == max) {
            if (g_rank == 0) {
                if (w == NULL) {
                    fprintf(stderr, "mpi_bench: unknown workload \"%.*s\" in WORKLOADS \"%s\"; known:", (int)len, p, list);
                    for (size_t i = 0; i < NWORKLOADS; i++)
                        fprintf(stderr, "%s%s", i == 0 ? " " : ",", workloads[i].name);
                    fprintf(stderr, "\n");
                } else {
                    fprintf(stderr, "mpi_bench: WORKLOADS \"%s\" names more than %d workloads\n", list, max);
                }
            }
            return -1;
        }
        out[n++] = w;
        if (comma == NULL)
            return n;
        p = comma + 1;
    }
}

/* One rank's state of a workload. */
typedef struct {
    const workload *w;
    gather g;          /* W_GATHER */
    reduce sum;        /* W_SUM */
    uint8_t *buf;      /* W_BCAST */
    int root;          /* W_BCAST */
    gather trial;      /* W_SDDP */
    gather *cuts;      /* W_SDDP: CUTS_PER_ITER */
    reduce lower, upper; /* W_SDDP */
} bench_case;

static void case_init(bench_case *c, const workload *w) {
    memset(c, 0, sizeof *c);
    c->w = w;
    switch (w->kind) {
    case W_GATHER:
        gather_init(&c->g, w->values, 0);
        break;
    case W_SUM:
        reduce_init(&c->sum, MPI_SUM, w->values, "recv");
        break;
    case W_BARRIER:
        break;
    case W_BCAST:
        c->root = g_size - 1;
        c->buf = xmalloc(BROADCAST_BYTES);
        break;
    case W_SDDP:
        gather_init(&c->trial, TRIAL_VALUES, 0);
        c->cuts = xmalloc(CUTS_PER_ITER * sizeof(gather));
        for (int k = 0; k < CUTS_PER_ITER; k++)
            gather_init(&c->cuts[k], CUT_VALUES, k);
        reduce_init(&c->lower, MPI_MIN, 1, "lower-bound (min) recv");
        reduce_init(&c->upper, MPI_SUM, UPPER_BOUND_STATS, "upper-bound (sum) recv");
        break;
    }
}

static void case_free(bench_case *c) {
    switch (c->w->kind) {
    case W_GATHER:
        gather_free(&c->g);
        break;
    case W_SUM:
        reduce_free(&c->sum);
        break;
    case W_BARRIER:
        break;
    case W_BCAST:
        free(c->buf);
        break;
    case W_SDDP:
        gather_free(&c->trial);
        for (int k = 0; k < CUTS_PER_ITER; k++)
            gather_free(&c->cuts[k]);
        free(c->cuts);
        reduce_free(&c->lower);
        reduce_free(&c->upper);
        break;
    }
}

static void case_fill(bench_case *c, int rep) {
    switch (c->w->kind) {
    case W_GATHER:
        gather_fill(&c->g, rep);
        break;
    case W_SUM:
        reduce_fill(&c->sum, rep);
        break;
    case W_BARRIER:
        break;
    case W_BCAST: {
        /* The root's bytes on the root, their complement elsewhere, so a
         * broadcast that does not arrive is detected. */
        uint8_t flip = g_rank != c->root ? 0xff : 0;
        for (int i = 0; i < BROADCAST_BYTES; i++)
            c->buf[i] = bcast_byte(rep, c->root, i) ^ flip;
        break;
    }
    case W_SDDP:
        gather_fill(&c->trial, rep);
        for (int k = 0; k < CUTS_PER_ITER; k++)
            gather_fill(&c->cuts[k], rep);
        reduce_fill(&c->lower, rep);
        reduce_fill(&c->upper, rep);
        break;
    }
}

/* case_run is the timed operation. */
static void case_run(bench_case *c) {
    switch (c->w->kind) {
    case W_GATHER:
        gather_run(&c->g);
        break;
    case W_SUM:
        reduce_run(&c->sum);
        break;
    case W_BARRIER:
        MPI_Barrier(MPI_COMM_WORLD);
        break;
    case W_BCAST:
        MPI_Bcast(c->buf, BROADCAST_BYTES, MPI_BYTE, c->root, MPI_COMM_WORLD);
        break;
    case W_SDDP:
        gather_run(&c->trial);
        for (int k = 0; k < CUTS_PER_ITER; k++)
            gather_run(&c->cuts[k]);
        reduce_run(&c->lower);
        reduce_run(&c->upper);
        break;
    }
}

static void case_check(bench_case *c, int rep) {
    const char *name = c->w->name;
    switch (c->w->kind) {
    case W_GATHER:
        gather_check(&c->g, rep, name, "recv");
        break;
    case W_SUM:
        reduce_check(&c->sum, rep, name);
        break;
    case W_BARRIER:
        break;
    case W_BCAST:
        for (int i = 0; i < BROADCAST_BYTES; i++) {
            uint8_t want = bcast_byte(rep, c->root, i);
            if (c->buf[i] != want) {
                char g[8], w[8];
                snprintf(g, sizeof g, "%d", c->buf[i]);
                snprintf(w, sizeof w, "%d", want);
                verify_failed(name, rep, "buf", i, g, w);
            }
        }
        break;
    case W_SDDP: {
        char buffer[64];
        gather_check(&c->trial, rep, name, "trial-point recv");
        for (int k = 0; k < CUTS_PER_ITER; k++) {
            snprintf(buffer, sizeof buffer, "cut %d recv", k);
            gather_check(&c->cuts[k], rep, name, buffer);
        }
        reduce_check(&c->lower, rep, name);
        reduce_check(&c->upper, rep, name);
        break;
    }
    }
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* run_workload runs a warm-up (repetition 0) and repeats timed repetitions
 * and, on rank 0, prints the result line. */
static void run_workload(const workload *w, int repeats) {
    bench_case c;
    case_init(&c, w);
    int64_t *times = xmalloc((size_t)repeats * sizeof(int64_t));
    for (int rep = 0; rep <= repeats; rep++) {
        case_fill(&c, rep);
        MPI_Barrier(MPI_COMM_WORLD);
        double start = MPI_Wtime();
        case_run(&c);
        double mine = MPI_Wtime() - start, slowest = 0;
        MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        case_check(&c, rep);
        if (rep > 0)
            times[rep - 1] = (int64_t)llround(slowest * 1e9);
    }
    qsort(times, (size_t)repeats, sizeof(int64_t), cmp_i64);
    int64_t med = repeats % 2 == 1 ? times[repeats / 2]
                                   : (times[repeats / 2 - 1] + times[repeats / 2]) / 2;
    if (g_rank == 0) {
        printf("%s %lld %lld %lld %d\n", w->name, (long long)med, (long long)times[0],
               (long long)times[repeats - 1], repeats);
        fflush(stdout);
    }
    free(times);
    case_free(&c);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);

    double scale = 1;
    if (argc > 3) {
        if (g_rank == 0)
            fprintf(stderr, "usage: mpi_bench [REPEATS_SCALE [WORKLOADS]]\n");
        MPI_Finalize();
        return 2;
    }
    if (argc >= 2) {
        char *end;
        scale = strtod(argv[1], &end);
        if (end == argv[1] || *end != '\0' || !(scale > 0) || scale > 1000) {
            if (g_rank == 0)
                fprintf(stderr, "mpi_bench: REPEATS_SCALE must be a number > 0 and at most 1000, got %s\n",
                        argv[1]);
            MPI_Finalize();
            return 2;
        }
    }

    const workload *selected[64];
    int nselected = 0;
    if (argc == 3) {
        nselected = select_workloads(argv[2], selected, (int)(sizeof selected / sizeof selected[0]));
        if (nselected < 0) {
            MPI_Finalize();
            return 2;
        }
    } else {
        for (size_t i = 0; i < NWORKLOADS; i++)
            if (!workloads[i].named_only)
                selected[nselected++] = &workloads[i];
    }

    if (g_rank == 0) {
        char version[MPI_MAX_LIBRARY_VERSION_STRING];
        int len = 0;
        MPI_Get_library_version(version, &len);
        char *nl = strchr(version, '\n');
        if (nl != NULL)
            *nl = '\0';
        char *comma = strchr(version, ',');
        if (comma != NULL)
            *comma = '\0';
        printf("# mpi_bench ranks=%d repeats-scale=%g library=%s\n", g_size, scale, version);
        printf("# workload median_ns min_ns max_ns repeats\n");
        fflush(stdout);
    }
    for (int i = 0; i < nselected; i++) {
        int repeats = (int)llround((double)selected[i]->repeats * scale);
        if (repeats < 1)
            repeats = 1;
        run_workload(selected[i], repeats);
    }
    MPI_Finalize();
    return 0;
}
