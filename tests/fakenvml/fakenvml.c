/*
 * A fake libnvidia-ml.so.1 for tests: a driver double that the unmodified
 * nvidia-ml-py (pynvml) loads through its ordinary ctypes path.
 *
 * Behaviour comes from a scenario file named by $FAKENVML_SCENARIO (see
 * README.md next to this file). Scenario time t runs in real time (or the time in $FAKENVML_CLOCK) from the
 * moment nvmlInit takes the reference count from 0 to 1, so a test process can
 * init/shutdown several times with a different scenario each time.
 *
 * Only what a monitoring exporter reads is implemented; every entry point counts
 * its calls so benchmarks can report NVML calls per GPU per second
 * ($FAKENVML_STATS names the file the counts are written to).
 *
 * This is a test double, not part of gpulse.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* ------------------------------------------------------------ NVML ABI */

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_NO_PERMISSION = 4, NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7, NVML_ERROR_DRIVER_NOT_LOADED = 9, NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_GPU_IS_LOST = 15, NVML_ERROR_RESET_REQUIRED = 16, NVML_ERROR_UNKNOWN = 999,
};

typedef union {
    double dVal; unsigned int uiVal; unsigned long ulVal; unsigned long long ullVal;
    long long sllVal; int siVal; unsigned short usVal;
} nvmlValue_t;
enum { VT_DOUBLE = 0, VT_UINT = 1, VT_ULONG = 2, VT_ULL = 3, VT_SLL = 4, VT_SINT = 5 };

typedef struct { unsigned long long timeStamp; nvmlValue_t sampleValue; } nvmlSample_t;

typedef struct {
    unsigned int fieldId, scopeId;
    long long timestamp, latencyUsec;
    int valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { unsigned int version; unsigned long long total, reserved, free, used; } nvmlMemory_v2_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct {
    unsigned int multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount, sharedEncoderCount,
        sharedJpegCount, sharedOfaCount, gpuInstanceSliceCount, computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

struct dev;
typedef struct dev *nvmlDevice_t;
typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

typedef struct { char *shortName, *longName, *unit; } nvmlGpmMetricInfo_t;
typedef struct {
    unsigned int metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    nvmlGpmMetricInfo_t metricInfo;
} nvmlGpmMetric_t;
struct gpm_sample;
typedef struct {
    unsigned int version, numMetrics;
    struct gpm_sample *sample1, *sample2;
    nvmlGpmMetric_t metrics[]; /* NVML_GPM_METRIC_MAX long; only numMetrics are touched */
} nvmlGpmMetricsGet_t;
typedef struct { unsigned int version, isSupportedDevice; } nvmlGpmSupport_t;

#define NVML_TOTAL_POWER_SAMPLES 0
#define NVML_GPU_UTILIZATION_SAMPLES 1
#define NVML_EVENT_TYPE_XID 0x8ULL
#define GPM_GRAPHICS_UTIL 1
#define GPM_SM_UTIL 2
#define GPM_SM_OCCUPANCY 3

/* field ids gpulse and common exporters read */
enum {
    FI_ECC_SBE_VOL_TOTAL = 3, FI_ECC_DBE_VOL_TOTAL = 4, FI_MEMORY_TEMP = 82, FI_TOTAL_ENERGY = 83,
    FI_NVLINK_CRC_FLIT_TOTAL = 38, FI_NVLINK_CRC_DATA_TOTAL = 45, FI_NVLINK_REPLAY_TOTAL = 52,
    FI_NVLINK_RECOVERY_TOTAL = 59,
    FI_PCIE_REPLAY = 94, FI_NVLINK_DATA_TX = 138, FI_NVLINK_DATA_RX = 139,
    FI_REMAPPED_COR = 142, FI_REMAPPED_UNC = 143, FI_REMAPPED_PENDING = 144, FI_REMAPPED_FAILURE = 145,
    FI_POWER_INSTANT = 186, FI_PCIE_TX_BYTES = 197, FI_PCIE_RX_BYTES = 198,
};

/* ------------------------------------------------------------ scenario model */

/* A value as a function of scenario time. */
enum fn_kind { FN_CONST, FN_SQUARE, FN_LINEAR, FN_FOLLOW, FN_STEPS };
#define MAX_STEPS 32
typedef struct {
    enum fn_kind kind;
    double v, period, duty, high, low, phase, start, rate, idle, max;
    int nsteps;
    double step_t[MAX_STEPS], step_v[MAX_STEPS];
} fn_t;

enum { P_UTIL, P_POWER, P_MEMORY, P_MEMORY_TOTAL, P_TEMP, P_MEM_TEMP, P_SM_CLOCK, P_MEM_CLOCK,
       P_REASONS, P_ECC_CORR, P_ECC_UNCORR, P_REMAP_CORR, P_REMAP_UNCORR, P_REMAP_PENDING,
       P_PCIE_TX, P_PCIE_RX, P_PCIE_REPLAY, P_NVLINK_TX, P_NVLINK_RX, P_POWER_LIMIT, P_FAN, P_SM,
       P_PCIE_GEN, P_PCIE_GEN_MAX, P_PCIE_WIDTH, P_PCIE_WIDTH_MAX,
       P_NVLINK_CRC_FLIT, P_NVLINK_CRC_DATA, P_NVLINK_REPLAY, P_NVLINK_RECOVERY,
       P_COUNT };
static const char *prop_names[P_COUNT] = {
    "util", "power", "memory", "memory_total", "temp", "memory_temp", "sm_clock", "mem_clock",
    "reasons", "ecc_corrected", "ecc_uncorrected", "remapped_corrected", "remapped_uncorrected",
    "remap_pending", "pcie_tx", "pcie_rx", "pcie_replay", "nvlink_tx", "nvlink_rx", "power_limit",
    "fan", "sm", "pcie_gen", "pcie_gen_max", "pcie_width", "pcie_width_max",
    "nvlink_crc_flit", "nvlink_crc_data", "nvlink_replay", "nvlink_recovery",
};

#define MAX_GPUS 1024
#define MAX_MIG 7
#define MAX_WINDOWS 8
#define MAX_FAULTS 256
#define MAX_XIDS 256
#define MAX_SETS 16
#define RING 512

/* A driver sample buffer: what nvmlDeviceGetSamples reads. */
typedef struct {
    int started;
    long long next_k;       /* next grid index to generate */
    unsigned long long ts[RING];
    unsigned int val[RING];
    int len, head;
} ring_t;

struct dev {
    int index;              /* physical index, or the parent's for a MIG device */
    int is_mig;
    struct dev *parent;
    unsigned int gi;        /* MIG GPU instance id */
    char profile[32];       /* MIG profile, e.g. 3g.40gb */
    /* scenario */
    char name[96];
    fn_t prop[P_COUNT];
    int has_prop[P_COUNT];
    int gpm;                /* GPM supported */
    int power_samples;      /* the driver buffers power samples */
    int power_instant;      /* the NVML_FI_DEV_POWER_INSTANT field answers */
    int arch;
    int mig_count;
    struct dev *mig[MAX_MIG];
    int nosamples_n;
    double nosamples_from[MAX_WINDOWS], nosamples_until[MAX_WINDOWS];
    /* driver state */
    ring_t util_ring, power_ring;
    double energy_mj, energy_t;
};

enum fault_kind { F_LOST, F_UNSUPPORTED, F_HANG, F_ERROR };
typedef struct {
    int gpu;                /* -1: every GPU */
    char call[64];          /* "*": every call */
    enum fault_kind kind;
    int code;
    double at, until, secs;
    char release[512];      /* hang: ends early once this path exists ("": never) */
} fault_t;

typedef struct { int gpu; double at; unsigned long long code; unsigned int gi; } xid_t;

typedef struct {
    int used;
    unsigned char registered[MAX_GPUS];
    unsigned char delivered[MAX_XIDS];
} event_set_t;

struct gpm_sample { struct dev *d; unsigned int gi; double t; int taken; };

static pthread_mutex_t L = PTHREAD_MUTEX_INITIALIZER;
static int refcount;
static long long epoch_us;      /* scenario t = 0 */
static long long init_us;       /* last successful nvmlInit */
static int ngpus;
static struct dev gpus[MAX_GPUS];
static struct dev migs[MAX_GPUS * MAX_MIG / 8 + MAX_MIG];
static int nmigs;
static char driver_version[80] = "550.54.15";
static int cuda_version = 12040;
static double sample_period = 1.0 / 6.0;
static int buffer_len = 120;
static int init_error;          /* nvmlInit fails with this code ... */
static double init_error_until = -1; /* ... until this scenario time (<0: always) */
static double driver_gone_at = -1, driver_gone_until = -1;
static fault_t faults[MAX_FAULTS];
static int nfaults;
static xid_t xids[MAX_XIDS];
static int nxids;
static event_set_t sets[MAX_SETS];

/* ------------------------------------------------------------ call statistics */

#define MAX_SYMS 160
static const char *sym_name[MAX_SYMS];
static unsigned long long sym_calls[MAX_SYMS];
static int nsyms;
static unsigned long long device_calls;
static unsigned long long util_samples_out;   /* utilisation samples handed to callers */
static long long stats_start_us, stats_written_us;

/* The time: the real clock, or with FAKENVML_CLOCK the µs since the epoch written in
 * that file (by an exporter on a virtual clock, GPULSE_VIRTUAL_CLOCK_FILE), so the
 * scenario follows the exporter's time however fast it runs. */
static long long now_us(void) {
    const char *path = getenv("FAKENVML_CLOCK");
    if (path && *path) {
        static long long last;
        FILE *f = fopen(path, "r");
        long long v;
        if (f) {
            if (fscanf(f, "%lld", &v) == 1) last = v;
            fclose(f);
        }
        return last;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

static double scen_t(void) { return (now_us() - epoch_us) / 1e6; }

static void write_stats_locked(void) {
    const char *path = getenv("FAKENVML_STATS");
    if (!path || !*path) return;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    long long now = now_us();
    fprintf(f, "elapsed %.6f\n", stats_start_us ? (now - stats_start_us) / 1e6 : 0.0);
    fprintf(f, "gpus %d\n", ngpus);
    fprintf(f, "device_calls %llu\n", device_calls);
    fprintf(f, "util_samples %llu\n", util_samples_out);
    for (int i = 0; i < nsyms; i++) fprintf(f, "call %s %llu\n", sym_name[i], sym_calls[i]);
    fclose(f);
    rename(tmp, path);
    stats_written_us = now;
}

/* Count one call; dump the counts at most twice a second so a process killed by
 * a signal still leaves recent figures behind. */
static void count_call(int *sid, const char *name, int on_device) {
    pthread_mutex_lock(&L);
    if (*sid < 0) {
        for (int i = 0; i < nsyms; i++)
            if (strcmp(sym_name[i], name) == 0) *sid = i;
        if (*sid < 0 && nsyms < MAX_SYMS) { sym_name[nsyms] = name; *sid = nsyms++; }
    }
    if (*sid >= 0) sym_calls[*sid]++;
    if (on_device) device_calls++;
    long long now = now_us();
    if (!stats_start_us) stats_start_us = now;
    if (now - stats_written_us > 500000) write_stats_locked();
    pthread_mutex_unlock(&L);
}

/* For tests in the same process: calls of one symbol so far (NULL: all device calls). */
EXPORT unsigned long long fakenvml_calls(const char *name) {
    unsigned long long n = 0;
    pthread_mutex_lock(&L);
    if (!name) n = device_calls;
    for (int i = 0; name && i < nsyms; i++)
        if (strcmp(sym_name[i], name) == 0) n = sym_calls[i];
    pthread_mutex_unlock(&L);
    return n;
}

__attribute__((destructor)) static void fake_fini(void) {
    pthread_mutex_lock(&L);
    write_stats_locked();
    pthread_mutex_unlock(&L);
}

/* ------------------------------------------------------------ value functions */

static double fn_eval(const struct dev *d, const fn_t *f, double t);

static double util_at(const struct dev *d, double t) {
    double u = fn_eval(d, &d->prop[P_UTIL], t);
    return u < 0 ? 0 : u > 1 ? 1 : u;
}

/* The busy share of (a, b], as the driver reports utilisation: the share of its
 * sample period in which a kernel ran, not the state at the sample instant. */
static double util_over(const struct dev *d, double a, double b) {
    enum { STEPS = 32 };
    double sum = 0;
    for (int i = 1; i <= STEPS; i++) sum += util_at(d, a + (b - a) * i / STEPS);
    return sum / STEPS;
}

static double fn_eval(const struct dev *d, const fn_t *f, double t) {
    switch (f->kind) {
    case FN_CONST: return f->v;
    case FN_SQUARE: {
        /* high for the first duty*period of each period, then low */
        if (f->period <= 0) return f->high;
        double x = fmod(t + f->phase, f->period);
        if (x < 0) x += f->period;
        return x < f->duty * f->period ? f->high : f->low;
    }
    case FN_LINEAR: return f->start + f->rate * (t < 0 ? 0 : t);
    case FN_FOLLOW: return f->idle + util_at(d, t) * (f->max - f->idle);
    case FN_STEPS: {
        double v = f->nsteps ? f->step_v[0] : 0;
        for (int i = 0; i < f->nsteps; i++)
            if (t >= f->step_t[i]) v = f->step_v[i];
        return v;
    }
    }
    return 0;
}

static double prop_at(const struct dev *d, int p, double t) { return fn_eval(d, &d->prop[p], t); }

/* Mean of a property over [t1, t2], numerically (square waves have edges). */
static double prop_mean(const struct dev *d, int p, double t1, double t2) {
    if (t2 <= t1) return prop_at(d, p, t2);
    int n = (int)((t2 - t1) / 0.001);
    if (n < 50) n = 50;
    if (n > 200000) n = 200000;
    double s = 0, h = (t2 - t1) / n;
    for (int i = 0; i < n; i++) s += prop_at(d, p, t1 + (i + 0.5) * h);
    return s / n;
}

/* ------------------------------------------------------------ scenario parsing */

static void set_const(fn_t *f, double v) { memset(f, 0, sizeof *f); f->kind = FN_CONST; f->v = v; }

static void dev_defaults(struct dev *d, int index) {
    memset(d, 0, sizeof *d);
    d->index = index;
    snprintf(d->name, sizeof d->name, "NVIDIA H100 80GB HBM3");
    d->arch = 9; /* Hopper */
    set_const(&d->prop[P_UTIL], 0.9);
    memset(&d->prop[P_POWER], 0, sizeof(fn_t));
    d->prop[P_POWER].kind = FN_FOLLOW; d->prop[P_POWER].idle = 70; d->prop[P_POWER].max = 690;
    set_const(&d->prop[P_MEMORY], 60e9);
    set_const(&d->prop[P_MEMORY_TOTAL], 85520809984.0);
    set_const(&d->prop[P_TEMP], 45);
    set_const(&d->prop[P_MEM_TEMP], 52);
    set_const(&d->prop[P_SM_CLOCK], 1980);
    set_const(&d->prop[P_MEM_CLOCK], 2619);
    set_const(&d->prop[P_REASONS], 0);
    set_const(&d->prop[P_ECC_CORR], 0);
    set_const(&d->prop[P_ECC_UNCORR], 0);
    set_const(&d->prop[P_REMAP_CORR], 0);
    set_const(&d->prop[P_REMAP_UNCORR], 0);
    set_const(&d->prop[P_REMAP_PENDING], 0);
    set_const(&d->prop[P_PCIE_TX], 0);
    set_const(&d->prop[P_PCIE_RX], 0);
    set_const(&d->prop[P_PCIE_REPLAY], 0);
    set_const(&d->prop[P_NVLINK_TX], 0);
    set_const(&d->prop[P_NVLINK_RX], 0);
    set_const(&d->prop[P_POWER_LIMIT], 700);
    set_const(&d->prop[P_FAN], 0);
    set_const(&d->prop[P_PCIE_GEN], 5);         /* an H100 SXM5 in a Gen5 x16 slot */
    set_const(&d->prop[P_PCIE_GEN_MAX], 5);
    set_const(&d->prop[P_PCIE_WIDTH], 16);
    set_const(&d->prop[P_PCIE_WIDTH_MAX], 16);
    set_const(&d->prop[P_NVLINK_CRC_FLIT], 0);
    set_const(&d->prop[P_NVLINK_CRC_DATA], 0);
    set_const(&d->prop[P_NVLINK_REPLAY], 0);
    set_const(&d->prop[P_NVLINK_RECOVERY], 0);
    memset(&d->prop[P_SM], 0, sizeof(fn_t));
    d->prop[P_SM].kind = FN_FOLLOW; d->prop[P_SM].idle = 0; d->prop[P_SM].max = 0.8;
    for (int p = 0; p < P_COUNT; p++) d->has_prop[p] = 1;
    d->has_prop[P_FAN] = 0; /* data-centre boards have no fan reading */
    d->gpm = 1;
    d->power_samples = 1;
    d->power_instant = 1;
}

static int parse_err_line;
static char parse_err[256];

static int fail(int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    parse_err_line = line;
    vsnprintf(parse_err, sizeof parse_err, fmt, ap);
    va_end(ap);
    return -1;
}

/* key=value lookup among tokens */
static const char *kv(char **tok, int ntok, const char *key) {
    size_t n = strlen(key);
    for (int i = 0; i < ntok; i++)
        if (strncmp(tok[i], key, n) == 0 && tok[i][n] == '=') return tok[i] + n + 1;
    return NULL;
}

static int kv_num(char **tok, int ntok, const char *key, double *out) {
    const char *s = kv(tok, ntok, key);
    if (!s) return 0;
    char *end;
    double v = strtod(s, &end);
    if (end == s) return -1;
    *out = v;
    return 1;
}

/* GPUs a scenario can address: its `gpus N` (wherever it stands), at least 1.
 * Parsing touches only these, so the unused rest of gpus[] (~26 kB each) stays
 * untouched zero pages and adds nothing to the resident memory of the process
 * that loads the library (which benchmarks measure). */
static int span = MAX_GPUS;

static int scenario_span(const char *path) {
    FILE *f = fopen(path, "r");
    int n = 1, v;
    char raw[2048];
    if (!f) return MAX_GPUS;
    while (fgets(raw, sizeof raw, f))
        if (sscanf(raw, " gpus %d", &v) == 1 && v > n) n = v;
    fclose(f);
    return n > MAX_GPUS ? MAX_GPUS : n;
}

/* "*", "3", "0-3", "0,2,5" -> mask over gpus[]; indices past the span address no GPU */
static int parse_sel(const char *s, unsigned char *mask, int line) {
    memset(mask, 0, MAX_GPUS);
    if (strcmp(s, "*") == 0) { memset(mask, 1, span); return 0; }
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        int a, b;
        if (sscanf(p, "%d-%d", &a, &b) == 2) {
        } else if (sscanf(p, "%d", &a) == 1) {
            b = a;
        } else {
            return fail(line, "bad GPU selector %s", s);
        }
        if (a < 0 || b >= MAX_GPUS || a > b) return fail(line, "GPU selector out of range: %s", s);
        for (int i = a; i <= b && i < span; i++) mask[i] = 1;
    }
    return 0;
}

static int parse_fn(char **tok, int ntok, fn_t *f, int line) {
    memset(f, 0, sizeof *f);
    if (ntok < 1) return fail(line, "missing value");
    double x;
    if (strcmp(tok[0], "const") == 0) {
        f->kind = FN_CONST;
        if (ntok < 2 || sscanf(tok[1], "%lf", &f->v) != 1) return fail(line, "const needs a number");
        return 0;
    }
    if (strcmp(tok[0], "square") == 0) {
        f->kind = FN_SQUARE; f->duty = 0.5; f->high = 1; f->low = 0;
        if (kv_num(tok, ntok, "period", &f->period) != 1) return fail(line, "square needs period=");
        if (kv_num(tok, ntok, "duty", &x) == 1) f->duty = x;
        if (kv_num(tok, ntok, "high", &x) == 1) f->high = x;
        if (kv_num(tok, ntok, "low", &x) == 1) f->low = x;
        if (kv_num(tok, ntok, "phase", &x) == 1) f->phase = x;
        return 0;
    }
    if (strcmp(tok[0], "linear") == 0) {
        f->kind = FN_LINEAR;
        if (kv_num(tok, ntok, "start", &x) == 1) f->start = x;
        if (kv_num(tok, ntok, "rate", &x) == 1) f->rate = x;
        return 0;
    }
    if (strcmp(tok[0], "follow") == 0) {
        f->kind = FN_FOLLOW;
        if (kv_num(tok, ntok, "idle", &f->idle) != 1 || kv_num(tok, ntok, "max", &f->max) != 1)
            return fail(line, "follow needs idle= and max=");
        return 0;
    }
    if (strcmp(tok[0], "steps") == 0) {
        /* steps T:V T:V ... — value V from time T on */
        f->kind = FN_STEPS;
        for (int i = 1; i < ntok && f->nsteps < MAX_STEPS; i++) {
            if (sscanf(tok[i], "%lf:%lf", &f->step_t[f->nsteps], &f->step_v[f->nsteps]) != 2)
                return fail(line, "steps wants T:V pairs, got %s", tok[i]);
            f->nsteps++;
        }
        return 0;
    }
    return fail(line, "unknown value kind %s (const, square, linear, follow, steps)", tok[0]);
}

static int prop_index(const char *s) {
    for (int p = 0; p < P_COUNT; p++)
        if (strcmp(prop_names[p], s) == 0) return p;
    return -1;
}

static int parse_mig(struct dev *d, char **tok, int ntok, int line) {
    /* mig <sel> PROFILE:GI [PROFILE:GI ...] */
    d->mig_count = 0;
    for (int i = 0; i < ntok; i++) {
        char prof[32];
        unsigned gi;
        if (sscanf(tok[i], "%31[^:]:%u", prof, &gi) != 2) return fail(line, "mig wants PROFILE:GI, got %s", tok[i]);
        if (d->mig_count >= MAX_MIG) return fail(line, "at most %d MIG instances", MAX_MIG);
        if (nmigs >= (int)(sizeof migs / sizeof migs[0])) return fail(line, "too many MIG instances");
        struct dev *m = &migs[nmigs++];
        *m = *d;
        m->is_mig = 1;
        m->parent = d;
        m->gi = gi;
        m->mig_count = 0;
        snprintf(m->profile, sizeof m->profile, "%s", prof);
        int slices = 1;
        double gb = 10;
        sscanf(prof, "%dg.%lfgb", &slices, &gb);
        set_const(&m->prop[P_MEMORY_TOTAL], gb * 1024 * 1024 * 1024);
        set_const(&m->prop[P_MEMORY], gb * 1024 * 1024 * 1024 / 2);
        d->mig[d->mig_count++] = m;
    }
    return 0;
}

static int load_scenario(void) {
    ngpus = 1;
    nfaults = nxids = nmigs = 0;
    init_error = 0;
    init_error_until = -1;
    driver_gone_at = driver_gone_until = -1;
    sample_period = 1.0 / 6.0;
    buffer_len = 120;
    snprintf(driver_version, sizeof driver_version, "550.54.15");
    cuda_version = 12040;
    memset(sets, 0, sizeof sets);
    parse_err[0] = 0;

    const char *path = getenv("FAKENVML_SCENARIO");
    span = path && *path ? scenario_span(path) : 1;
    for (int i = 0; i < span; i++) dev_defaults(&gpus[i], i);
    if (!path || !*path) return 0; /* one default GPU */
    FILE *f = fopen(path, "r");
    if (!f) return fail(0, "cannot open %s: %s", path, strerror(errno));
    char raw[2048];
    int line = 0, rc = 0;
    static unsigned char mask[MAX_GPUS];
    while (rc == 0 && fgets(raw, sizeof raw, f)) {
        line++;
        char *hash = strchr(raw, '#');
        if (hash) *hash = 0;
        char copy[2048];
        snprintf(copy, sizeof copy, "%s", raw);
        char *tok[64];
        int ntok = 0;
        for (char *save = NULL, *p = strtok_r(raw, " \t\r\n", &save); p && ntok < 64; p = strtok_r(NULL, " \t\r\n", &save))
            tok[ntok++] = p;
        if (ntok == 0) continue;
        const char *dir = tok[0];
        double x;
        if (strcmp(dir, "gpus") == 0 && ntok == 2) {
            ngpus = atoi(tok[1]);
            if (ngpus < 0 || ngpus > MAX_GPUS) rc = fail(line, "gpus must be 0..%d", MAX_GPUS);
        } else if (strcmp(dir, "driver") == 0 && ntok == 2) {
            snprintf(driver_version, sizeof driver_version, "%s", tok[1]);
        } else if (strcmp(dir, "cuda") == 0 && ntok == 2) {
            cuda_version = atoi(tok[1]);
        } else if (strcmp(dir, "sample_period") == 0 && ntok == 2) {
            sample_period = atof(tok[1]);
            if (sample_period <= 0.001) rc = fail(line, "sample_period too small");
        } else if (strcmp(dir, "buffer") == 0 && ntok == 2) {
            buffer_len = atoi(tok[1]);
            if (buffer_len < 1 || buffer_len > RING) rc = fail(line, "buffer must be 1..%d", RING);
        } else if (strcmp(dir, "init_error") == 0 && ntok >= 2) {
            init_error = atoi(tok[1]);
            if (kv_num(tok + 2, ntok - 2, "until", &x) == 1) init_error_until = x;
        } else if (strcmp(dir, "driver_gone") == 0) {
            if (kv_num(tok + 1, ntok - 1, "at", &driver_gone_at) != 1 ||
                kv_num(tok + 1, ntok - 1, "until", &driver_gone_until) != 1)
                rc = fail(line, "driver_gone needs at= and until=");
        } else if (strcmp(dir, "name") == 0 && ntok >= 3) {
            if ((rc = parse_sel(tok[1], mask, line)) != 0) break;
            /* the rest of the line, verbatim */
            char *rest = strstr(copy, tok[1]) + strlen(tok[1]);
            while (*rest == ' ' || *rest == '\t') rest++;
            rest[strcspn(rest, "\r\n")] = 0;
            for (int i = 0; i < MAX_GPUS; i++)
                if (mask[i]) snprintf(gpus[i].name, sizeof gpus[i].name, "%s", rest);
        } else if (strcmp(dir, "arch") == 0 && ntok == 3) {
            if ((rc = parse_sel(tok[1], mask, line)) != 0) break;
            for (int i = 0; i < MAX_GPUS; i++) if (mask[i]) gpus[i].arch = atoi(tok[2]);
        } else if (strcmp(dir, "gpm") == 0 && ntok == 3) {
            if ((rc = parse_sel(tok[1], mask, line)) != 0) break;
            for (int i = 0; i < MAX_GPUS; i++) if (mask[i]) gpus[i].gpm = strcmp(tok[2], "on") == 0;
        } else if (strcmp(dir, "power_samples") == 0 && ntok == 3) {
            if ((rc = parse_sel(tok[1], mask, line)) != 0) break;
            for (int i = 0; i < MAX_GPUS; i++) if (mask[i]) gpus[i].power_samples = strcmp(tok[2], "on") == 0;
        } else if (strcmp(dir, "power_instant") == 0 && ntok == 3) {
            if ((rc = parse_sel(tok[1], mask, line)) != 0) break;
            for (int i = 0; i < MAX_GPUS; i++) if (mask[i]) gpus[i].power_instant = strcmp(tok[2], "on") == 0;
        } else if (strcmp(dir, "unsupported") == 0 && ntok == 3) {
            /* unsupported <sel> <property>: the property reads NOT_SUPPORTED */
            if ((rc = parse_sel(tok[1], mask, line)) != 0) break;
            int p = prop_index(tok[2]);
            if (p < 0) { rc = fail(line, "unknown property %s", tok[2]); break; }
            for (int i = 0; i < MAX_GPUS; i++) if (mask[i]) gpus[i].has_prop[p] = 0;
        } else if (strcmp(dir, "nosamples") == 0 && ntok >= 2) {
            /* nosamples <sel> at=A until=B: the driver buffers no utilisation samples (idle GPU) */
            if ((rc = parse_sel(tok[1], mask, line)) != 0) break;
            double a = 0, b = 1e18;
            kv_num(tok + 2, ntok - 2, "at", &a);
            kv_num(tok + 2, ntok - 2, "until", &b);
            for (int i = 0; i < MAX_GPUS; i++) {
                if (!mask[i] || gpus[i].nosamples_n >= MAX_WINDOWS) continue;
                gpus[i].nosamples_from[gpus[i].nosamples_n] = a;
                gpus[i].nosamples_until[gpus[i].nosamples_n++] = b;
            }
        } else if (strcmp(dir, "mig") == 0 && ntok >= 3) {
            if ((rc = parse_sel(tok[1], mask, line)) != 0) break;
            for (int i = 0; i < MAX_GPUS && rc == 0; i++)
                if (mask[i] && i < ngpus) rc = parse_mig(&gpus[i], tok + 2, ntok - 2, line);
        } else if (strcmp(dir, "fault") == 0 && ntok >= 4) {
            /* fault <gpu|*> <call|*> lost|unsupported|hang|error [at=] [until=] [secs=] [code=] */
            if (nfaults >= MAX_FAULTS) { rc = fail(line, "too many faults"); break; }
            fault_t *ft = &faults[nfaults];
            memset(ft, 0, sizeof *ft);
            ft->gpu = strcmp(tok[1], "*") == 0 ? -1 : atoi(tok[1]);
            snprintf(ft->call, sizeof ft->call, "%s", tok[2]);
            ft->until = 1e18;
            if (strcmp(tok[3], "lost") == 0) ft->kind = F_LOST;
            else if (strcmp(tok[3], "unsupported") == 0) ft->kind = F_UNSUPPORTED;
            else if (strcmp(tok[3], "hang") == 0) ft->kind = F_HANG;
            else if (strcmp(tok[3], "error") == 0) ft->kind = F_ERROR;
            else { rc = fail(line, "unknown fault %s (lost, unsupported, hang, error)", tok[3]); break; }
            kv_num(tok + 4, ntok - 4, "at", &ft->at);
            kv_num(tok + 4, ntok - 4, "until", &ft->until);
            if (kv_num(tok + 4, ntok - 4, "secs", &ft->secs) == 1 && ft->kind == F_HANG) ft->until = ft->at + ft->secs;
            if (kv_num(tok + 4, ntok - 4, "code", &x) == 1) ft->code = (int)x;
            const char *rel = kv(tok + 4, ntok - 4, "release");
            if (rel && ft->kind != F_HANG) { rc = fail(line, "release= is for a hang"); break; }
            if (rel && strlen(rel) >= sizeof ft->release) { rc = fail(line, "release= path too long"); break; }
            if (rel) snprintf(ft->release, sizeof ft->release, "%s", rel);
            if (ft->kind == F_ERROR && !ft->code) ft->code = NVML_ERROR_UNKNOWN;
            nfaults++;
        } else if (strcmp(dir, "xid") == 0 && ntok >= 3) {
            /* xid <gpu> at=T code=C [gi=N] */
            if (nxids >= MAX_XIDS) { rc = fail(line, "too many xid events"); break; }
            xid_t *e = &xids[nxids];
            e->gpu = atoi(tok[1]);
            e->gi = 0xFFFFFFFFu;
            if (kv_num(tok + 2, ntok - 2, "at", &e->at) != 1) { rc = fail(line, "xid needs at="); break; }
            if (kv_num(tok + 2, ntok - 2, "code", &x) != 1) { rc = fail(line, "xid needs code="); break; }
            e->code = (unsigned long long)x;
            if (kv_num(tok + 2, ntok - 2, "gi", &x) == 1) e->gi = (unsigned)x;
            nxids++;
        } else if (prop_index(dir) >= 0 && ntok >= 3) {
            int p = prop_index(dir);
            if ((rc = parse_sel(tok[1], mask, line)) != 0) break;
            fn_t fn;
            if ((rc = parse_fn(tok + 2, ntok - 2, &fn, line)) != 0) break;
            for (int i = 0; i < MAX_GPUS; i++)
                if (mask[i]) { gpus[i].prop[p] = fn; gpus[i].has_prop[p] = 1; }
        } else {
            rc = fail(line, "cannot parse: %s", dir);
        }
    }
    fclose(f);
    /* MIG instances copied their parent's properties when declared; a property
     * set after the mig line applies to the parent only, which is fine. */
    return rc;
}

/* ------------------------------------------------------------ guards */

static int valid_dev(struct dev *d) {
    if (d >= gpus && d < gpus + ngpus) return 1;
    if (d >= migs && d < migs + nmigs) return 1;
    return 0;
}

/* Apply the scenario's faults to one call on one device; may block (hang). */
static nvmlReturn_t guard(struct dev *d, const char *call) {
    if (refcount <= 0) return NVML_ERROR_UNINITIALIZED;
    if (d && !valid_dev(d)) return NVML_ERROR_INVALID_ARGUMENT;
    double t = scen_t();
    if (driver_gone_at >= 0) {
        if (t >= driver_gone_at && t < driver_gone_until) return d ? NVML_ERROR_GPU_IS_LOST : NVML_ERROR_DRIVER_NOT_LOADED;
        /* handles from before the driver went away are dead until nvmlInit again */
        double init_t = (init_us - epoch_us) / 1e6;
        if (t >= driver_gone_until && init_t < driver_gone_until) return NVML_ERROR_UNINITIALIZED;
    }
    if (!d) return NVML_SUCCESS;
    int idx = d->index;
    for (int i = 0; i < nfaults; i++) {
        fault_t *ft = &faults[i];
        if (ft->gpu >= 0 && ft->gpu != idx) continue;
        if (strcmp(ft->call, "*") != 0 && strcmp(ft->call, call) != 0) continue;
        if (t < ft->at || t >= ft->until) continue;
        switch (ft->kind) {
        case F_LOST: return NVML_ERROR_GPU_IS_LOST;
        case F_UNSUPPORTED: return NVML_ERROR_NOT_SUPPORTED;
        case F_ERROR: return ft->code;
        case F_HANG: {
            /* the driver is stuck until the window ends (or its release file appears,
             * so a test need not sit out a hang long enough to outlast its checks);
             * calls entering it wait */
            double left = ft->until - t;
            while (left > 0) {
                if (ft->release[0] && access(ft->release, F_OK) == 0) break;
                double step = ft->release[0] && left > 0.05 ? 0.05 : left;
                struct timespec ts = { (time_t)step, (long)((step - (time_t)step) * 1e9) };
                while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
                left -= step;
            }
            t = scen_t();
            break;
        }
        }
    }
    return NVML_SUCCESS;
}

#define ENTER_DEV(d, name) \
    static int _sid = -1; \
    count_call(&_sid, name, 1); \
    { nvmlReturn_t _g = guard((d), name); if (_g) return _g; }

#define ENTER_SYS(name) \
    static int _sid = -1; \
    count_call(&_sid, name, 0); \
    { nvmlReturn_t _g = guard(NULL, name); if (_g) return _g; }

static nvmlReturn_t put_str(char *dst, unsigned len, const char *src) {
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

static struct dev *phys(struct dev *d) { return d->is_mig ? d->parent : d; }

/* A device query answering one unsigned int; NOT_SUPPORTED when `unsupported`. */
#define UINT_GETTER(sym, unsupported, value) \
    EXPORT nvmlReturn_t sym(nvmlDevice_t d, unsigned int *out) { \
        ENTER_DEV(d, #sym); \
        if (!out) return NVML_ERROR_INVALID_ARGUMENT; \
        if (unsupported) return NVML_ERROR_NOT_SUPPORTED; \
        *out = (value); \
        return NVML_SUCCESS; \
    }

/* ------------------------------------------------------------ init / system */

static const char *error_strings(nvmlReturn_t r) {
    switch (r) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    default: return "Unknown Error";
    }
}

EXPORT const char *nvmlErrorString(nvmlReturn_t r) { return error_strings(r); }

/* The scenario is (re)loaded when nvmlInit finds a different scenario file than
 * the one loaded (another path, or the file changed). Re-initialising on the same
 * scenario, as an exporter does after a driver reload, keeps its clock and state. */
static char loaded_key[4200];

static void scenario_key(char *buf, size_t n) {
    const char *path = getenv("FAKENVML_SCENARIO");
    struct stat st;
    if (path && *path && stat(path, &st) == 0)
        snprintf(buf, n, "%s|%lld|%lld|%ld", path, (long long)st.st_mtim.tv_sec, (long long)st.st_size, st.st_mtim.tv_nsec);
    else
        snprintf(buf, n, "%s", path ? path : "");
}

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    static int _sid = -1;
    count_call(&_sid, "nvmlInitWithFlags", 0);
    pthread_mutex_lock(&L);
    char key[sizeof loaded_key];
    scenario_key(key, sizeof key);
    if (refcount == 0 && strcmp(key, loaded_key) != 0) {
        epoch_us = now_us();
        if (load_scenario() != 0) {
            fprintf(stderr, "fakenvml: scenario line %d: %s\n", parse_err_line, parse_err);
            loaded_key[0] = 0;
            pthread_mutex_unlock(&L);
            return NVML_ERROR_UNKNOWN;
        }
        snprintf(loaded_key, sizeof loaded_key, "%s", key);
        const char *e = getenv("FAKENVML_EPOCH_US"); /* lets a test pin t = 0 */
        if (e && *e) epoch_us = atoll(e);
    }
    double t = scen_t();
    nvmlReturn_t r = NVML_SUCCESS;
    if (init_error && (init_error_until < 0 || t < init_error_until)) r = init_error;
    else if (driver_gone_at >= 0 && t >= driver_gone_at && t < driver_gone_until) r = NVML_ERROR_DRIVER_NOT_LOADED;
    if (r == NVML_SUCCESS) {
        refcount++;
        init_us = now_us();
    }
    pthread_mutex_unlock(&L);
    return r;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
EXPORT nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

EXPORT nvmlReturn_t nvmlShutdown(void) {
    static int _sid = -1;
    count_call(&_sid, "nvmlShutdown", 0);
    pthread_mutex_lock(&L);
    nvmlReturn_t r = refcount > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
    if (refcount > 0) refcount--;
    pthread_mutex_unlock(&L);
    return r;
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int len) {
    ENTER_SYS("nvmlSystemGetDriverVersion");
    return put_str(v, len, driver_version);
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *v, unsigned int len) {
    ENTER_SYS("nvmlSystemGetNVMLVersion");
    char buf[96];
    snprintf(buf, sizeof buf, "12.%s", driver_version);
    return put_str(v, len, buf);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) {
    ENTER_SYS("nvmlSystemGetCudaDriverVersion");
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    *v = cuda_version;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return nvmlSystemGetCudaDriverVersion(v); }

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) {
    ENTER_SYS("nvmlDeviceGetCount_v2");
    if (!n) return NVML_ERROR_INVALID_ARGUMENT;
    *n = ngpus;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *n) { return nvmlDeviceGetCount_v2(n); }

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *out) {
    ENTER_SYS("nvmlDeviceGetHandleByIndex_v2");
    if (!out || i >= (unsigned)ngpus) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t g = guard(&gpus[i], "nvmlDeviceGetHandleByIndex_v2");
    if (g) return g;
    *out = &gpus[i];
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *out) {
    return nvmlDeviceGetHandleByIndex_v2(i, out);
}

/* ------------------------------------------------------------ identity */

static void uuid_of(struct dev *d, char *buf, size_t n) {
    if (d->is_mig)
        snprintf(buf, n, "MIG-%08x-%04x-4%03x-8000-%012x", 0xfa4e0000u + d->parent->index, d->gi, d->gi, d->parent->index);
    else
        snprintf(buf, n, "GPU-%08x-0000-4000-8000-%012x", 0xfa4e0000u + d->index, d->index);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned int len) {
    ENTER_DEV(d, "nvmlDeviceGetUUID");
    char buf[96];
    uuid_of(d, buf, sizeof buf);
    return put_str(uuid, len, buf);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *out) {
    ENTER_SYS("nvmlDeviceGetHandleByUUID");
    char buf[96];
    for (int i = 0; i < ngpus; i++) {
        uuid_of(&gpus[i], buf, sizeof buf);
        if (uuid && strcmp(buf, uuid) == 0) { *out = &gpus[i]; return NVML_SUCCESS; }
    }
    return NVML_ERROR_NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned int len) {
    ENTER_DEV(d, "nvmlDeviceGetName");
    char buf[160];
    if (d->is_mig) snprintf(buf, sizeof buf, "%s MIG %s", d->parent->name, d->profile);
    else snprintf(buf, sizeof buf, "%s", d->name);
    return put_str(name, len, buf);
}

static nvmlReturn_t fill_pci(struct dev *d, nvmlPciInfo_t *p) {
    if (!p) return NVML_ERROR_INVALID_ARGUMENT;
    memset(p, 0, sizeof *p);
    struct dev *ph = phys(d);
    p->domain = 0;
    p->bus = 0x18 + ph->index;
    p->device = 0;
    p->pciDeviceId = 0x233010DE;
    p->pciSubSystemId = 0x16C110DE;
    snprintf(p->busId, sizeof p->busId, "00000000:%02X:00.0", p->bus);
    snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "0000:%02X:00.0", p->bus);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p) {
    ENTER_DEV(d, "nvmlDeviceGetPciInfo_v3");
    return fill_pci(d, p);
}
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t *p) {
    ENTER_DEV(d, "nvmlDeviceGetPciInfo_v2");
    return fill_pci(d, p);
}
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, nvmlPciInfo_t *p) {
    ENTER_DEV(d, "nvmlDeviceGetPciInfo");
    return fill_pci(d, p);
}

EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t d, unsigned int *a) {
    ENTER_DEV(d, "nvmlDeviceGetArchitecture");
    if (!a) return NVML_ERROR_INVALID_ARGUMENT;
    *a = phys(d)->arch;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor) {
    ENTER_DEV(d, "nvmlDeviceGetCudaComputeCapability");
    if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    *major = phys(d)->arch >= 9 ? 9 : 8;
    *minor = 0;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------ MIG */

UINT_GETTER(nvmlDeviceGetIndex, 0, d->index)
UINT_GETTER(nvmlDeviceGetMinorNumber, 0, d->index)
UINT_GETTER(nvmlDeviceIsMigDeviceHandle, 0, d->is_mig)
UINT_GETTER(nvmlDeviceGetGpuInstanceId, !d->is_mig, d->gi)
UINT_GETTER(nvmlDeviceGetComputeInstanceId, !d->is_mig, 0)

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int *cur, unsigned int *pending) {
    ENTER_DEV(d, "nvmlDeviceGetMigMode");
    if (!cur || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->is_mig) return NVML_ERROR_NOT_SUPPORTED;
    *cur = *pending = d->mig_count > 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int *n) {
    ENTER_DEV(d, "nvmlDeviceGetMaxMigDeviceCount");
    if (!n) return NVML_ERROR_INVALID_ARGUMENT;
    *n = d->is_mig ? 0 : MAX_MIG;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int i, nvmlDevice_t *out) {
    ENTER_DEV(d, "nvmlDeviceGetMigDeviceHandleByIndex");
    if (!out || d->is_mig || i >= MAX_MIG) return NVML_ERROR_INVALID_ARGUMENT;
    if ((int)i >= d->mig_count) return NVML_ERROR_NOT_FOUND;
    *out = d->mig[i];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t d, nvmlDevice_t *out) {
    ENTER_DEV(d, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle");
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    *out = d->parent;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t d, nvmlDeviceAttributes_t *a) {
    ENTER_DEV(d, "nvmlDeviceGetAttributes_v2");
    if (!a) return NVML_ERROR_INVALID_ARGUMENT;
    memset(a, 0, sizeof *a);
    int slices = 7;
    if (d->is_mig) sscanf(d->profile, "%dg", &slices);
    a->multiprocessorCount = 132 * slices / 7;
    a->gpuInstanceSliceCount = slices;
    a->computeInstanceSliceCount = slices;
    a->memorySizeMB = (unsigned long long)(prop_at(d, P_MEMORY_TOTAL, 0) / (1024 * 1024));
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------ readings */

#define NEED(d, p) do { if (!(d)->has_prop[p]) return NVML_ERROR_NOT_SUPPORTED; } while (0)

static void memory_now(struct dev *d, unsigned long long *total, unsigned long long *used,
                       unsigned long long *free_) {
    double t = scen_t();
    *total = (unsigned long long)prop_at(d, P_MEMORY_TOTAL, t);
    *used = (unsigned long long)prop_at(d, P_MEMORY, t);
    if (*used > *total) *used = *total;
    *free_ = *total - *used;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    ENTER_DEV(d, "nvmlDeviceGetMemoryInfo");
    if (!m) return NVML_ERROR_INVALID_ARGUMENT;
    memory_now(d, &m->total, &m->used, &m->free);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m) {
    ENTER_DEV(d, "nvmlDeviceGetMemoryInfo_v2");
    if (!m) return NVML_ERROR_INVALID_ARGUMENT;
    m->reserved = 0;
    memory_now(d, &m->total, &m->used, &m->free);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    ENTER_DEV(d, "nvmlDeviceGetBAR1MemoryInfo");
    if (!m) return NVML_ERROR_INVALID_ARGUMENT;
    m->total = 128ULL << 30;
    m->used = 64ULL << 20;
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw) {
    ENTER_DEV(d, "nvmlDeviceGetPowerUsage");
    if (!mw) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->is_mig) return NVML_ERROR_NOT_SUPPORTED;
    NEED(d, P_POWER);
    /* the mean over the second before the call, as on Ampere (but GA100) and newer */
    double t = scen_t(), sum = 0;
    for (int i = 1; i <= 32; i++) sum += prop_at(d, P_POWER, t - 1.0 + i / 32.0);
    *mw = (unsigned int)(sum / 32 * 1000.0);
    return NVML_SUCCESS;
}

static nvmlReturn_t power_limit(struct dev *d, unsigned int *mw) {
    if (!mw) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->is_mig) return NVML_ERROR_NOT_SUPPORTED;
    NEED(d, P_POWER_LIMIT);
    *mw = (unsigned int)(prop_at(d, P_POWER_LIMIT, scen_t()) * 1000.0);
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *mw) {
    ENTER_DEV(d, "nvmlDeviceGetEnforcedPowerLimit");
    return power_limit(d, mw);
}
EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t d, unsigned int *mw) {
    ENTER_DEV(d, "nvmlDeviceGetPowerManagementLimit");
    return power_limit(d, mw);
}

/* Energy in mJ since init: the power function integrated up to now. */
static unsigned long long energy_mj(struct dev *d) {
    pthread_mutex_lock(&L);
    double t = scen_t();
    if (t > d->energy_t) {
        d->energy_mj += prop_mean(d, P_POWER, d->energy_t, t) * (t - d->energy_t) * 1000.0;
        d->energy_t = t;
    }
    unsigned long long e = (unsigned long long)d->energy_mj;
    pthread_mutex_unlock(&L);
    return e;
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t d, unsigned long long *mj) {
    ENTER_DEV(d, "nvmlDeviceGetTotalEnergyConsumption");
    if (!mj) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->is_mig) return NVML_ERROR_NOT_SUPPORTED;
    NEED(d, P_POWER);
    *mj = energy_mj(d);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *c) {
    ENTER_DEV(d, "nvmlDeviceGetTemperature");
    if (!c || sensor != 0) return NVML_ERROR_INVALID_ARGUMENT;
    d = phys(d);
    NEED(d, P_TEMP);
    *c = (unsigned int)prop_at(d, P_TEMP, scen_t());
    return NVML_SUCCESS;
}

typedef struct { unsigned int version; int sensorType; int temperature; } nvmlTemperature_t;

EXPORT nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t d, nvmlTemperature_t *t) {
    ENTER_DEV(d, "nvmlDeviceGetTemperatureV");
    if (!t || t->sensorType != 0) return NVML_ERROR_INVALID_ARGUMENT;
    d = phys(d);
    NEED(d, P_TEMP);
    t->temperature = (int)prop_at(d, P_TEMP, scen_t());
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t d, int kind, unsigned int *c) {
    ENTER_DEV(d, "nvmlDeviceGetTemperatureThreshold");
    if (!c) return NVML_ERROR_INVALID_ARGUMENT;
    *c = kind == 0 ? 92 : 87;
    return NVML_SUCCESS;
}

/* data-centre boards have no fan reading unless the scenario sets one */
UINT_GETTER(nvmlDeviceGetFanSpeed, !phys(d)->has_prop[P_FAN],
            (unsigned int)(prop_at(phys(d), P_FAN, scen_t()) * 100.0))

UINT_GETTER(nvmlDeviceGetCurrPcieLinkGeneration, !phys(d)->has_prop[P_PCIE_GEN],
            (unsigned int)prop_at(phys(d), P_PCIE_GEN, scen_t()))
UINT_GETTER(nvmlDeviceGetMaxPcieLinkGeneration, !phys(d)->has_prop[P_PCIE_GEN_MAX],
            (unsigned int)prop_at(phys(d), P_PCIE_GEN_MAX, scen_t()))
UINT_GETTER(nvmlDeviceGetCurrPcieLinkWidth, !phys(d)->has_prop[P_PCIE_WIDTH],
            (unsigned int)prop_at(phys(d), P_PCIE_WIDTH, scen_t()))
UINT_GETTER(nvmlDeviceGetMaxPcieLinkWidth, !phys(d)->has_prop[P_PCIE_WIDTH_MAX],
            (unsigned int)prop_at(phys(d), P_PCIE_WIDTH_MAX, scen_t()))

EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int *mhz) {
    ENTER_DEV(d, "nvmlDeviceGetClockInfo");
    if (!mhz) return NVML_ERROR_INVALID_ARGUMENT;
    d = phys(d);
    double t = scen_t();
    if (type == 0 || type == 1) { NEED(d, P_SM_CLOCK); *mhz = (unsigned)prop_at(d, P_SM_CLOCK, t); }
    else if (type == 2) { NEED(d, P_MEM_CLOCK); *mhz = (unsigned)prop_at(d, P_MEM_CLOCK, t); }
    else return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t d, int type, unsigned int *mhz) {
    ENTER_DEV(d, "nvmlDeviceGetMaxClockInfo");
    if (!mhz) return NVML_ERROR_INVALID_ARGUMENT;
    *mhz = type == 2 ? 2619 : 1980;
    return NVML_SUCCESS;
}

static nvmlReturn_t reasons(struct dev *d, unsigned long long *r) {
    if (!r) return NVML_ERROR_INVALID_ARGUMENT;
    d = phys(d);
    NEED(d, P_REASONS);
    *r = (unsigned long long)prop_at(d, P_REASONS, scen_t());
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *r) {
    ENTER_DEV(d, "nvmlDeviceGetCurrentClocksEventReasons");
    return reasons(d, r);
}
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long *r) {
    ENTER_DEV(d, "nvmlDeviceGetCurrentClocksThrottleReasons");
    return reasons(d, r);
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int type, int counter, unsigned long long *n) {
    ENTER_DEV(d, "nvmlDeviceGetTotalEccErrors");
    (void)counter;
    if (!n || type < 0 || type > 1) return NVML_ERROR_INVALID_ARGUMENT;
    d = phys(d);
    int p = type == 0 ? P_ECC_CORR : P_ECC_UNCORR;
    NEED(d, p);
    *n = (unsigned long long)prop_at(d, p, scen_t());
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned int *corr, unsigned int *unc,
                                              unsigned int *pending, unsigned int *failure) {
    ENTER_DEV(d, "nvmlDeviceGetRemappedRows");
    if (!corr || !unc || !pending || !failure) return NVML_ERROR_INVALID_ARGUMENT;
    d = phys(d);
    NEED(d, P_REMAP_CORR);
    double t = scen_t();
    *corr = (unsigned)prop_at(d, P_REMAP_CORR, t);
    *unc = (unsigned)prop_at(d, P_REMAP_UNCORR, t);
    *pending = (unsigned)prop_at(d, P_REMAP_PENDING, t);
    *failure = 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
    ENTER_DEV(d, "nvmlDeviceGetUtilizationRates");
    if (!u) return NVML_ERROR_INVALID_ARGUMENT;
    /* like the real driver: no utilisation for MIG devices or a MIG-enabled GPU */
    if (d->is_mig || d->mig_count) return NVML_ERROR_NOT_SUPPORTED;
    NEED(d, P_UTIL);
    double t = scen_t();
    u->gpu = (unsigned)lround(util_at(d, t) * 100.0);
    u->memory = u->gpu / 2;
    return NVML_SUCCESS;
}

static void ring_push(ring_t *r, unsigned long long ts, unsigned int v) {
    int cap = buffer_len;
    int pos = (r->head + r->len) % cap;
    if (r->len < cap) r->len++;
    else r->head = (r->head + 1) % cap;
    r->ts[pos] = ts;
    r->val[pos] = v;
}

static int in_nosamples(struct dev *d, double t) {
    for (int i = 0; i < d->nosamples_n; i++)
        if (t >= d->nosamples_from[i] && t < d->nosamples_until[i]) return 1;
    return 0;
}

/* Generate the driver's samples up to now on the fixed grid t_k = k * sample_period
 * (scenario time), as the driver does in the background: utilisation in percent,
 * power in mW. The driver was running before t = 0, so the first read finds a full
 * buffer (the scenario's functions extend to negative t). */
static void ring_fill_locked(struct dev *d, ring_t *r, int type) {
    double t = scen_t();
    long long last_k = (long long)floor(t / sample_period);
    if (!r->started || r->next_k < last_k - buffer_len) r->next_k = last_k - buffer_len + 1;
    r->started = 1;
    for (long long k = r->next_k; k <= last_k; k++) {
        double tk = k * sample_period;
        unsigned long long ts = (unsigned long long)(epoch_us + (long long)llround(tk * 1e6));
        if (type == NVML_GPU_UTILIZATION_SAMPLES) {
            if (in_nosamples(d, tk)) continue;
            ring_push(r, ts, (unsigned)lround(util_over(d, tk - sample_period, tk) * 100.0));
        } else {
            ring_push(r, ts, (unsigned)lround(prop_at(d, P_POWER, tk) * 1000.0));
        }
    }
    if (last_k + 1 > r->next_k) r->next_k = last_k + 1;
}

EXPORT nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t d, int type, unsigned long long last_seen,
                                         int *value_type, unsigned int *count, nvmlSample_t *out) {
    ENTER_DEV(d, "nvmlDeviceGetSamples");
    if (!value_type || !count) return NVML_ERROR_INVALID_ARGUMENT;
    ring_t *r;
    if (type == NVML_GPU_UTILIZATION_SAMPLES) {
        /* like the real driver: no utilisation for MIG devices or a MIG-enabled GPU */
        if (d->is_mig || d->mig_count) return NVML_ERROR_NOT_SUPPORTED;
        NEED(d, P_UTIL);
        r = &d->util_ring;
    } else if (type == NVML_TOTAL_POWER_SAMPLES) {
        if (d->is_mig || !d->power_samples) return NVML_ERROR_NOT_SUPPORTED;
        NEED(d, P_POWER);
        r = &d->power_ring;
    } else {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    pthread_mutex_lock(&L);
    ring_fill_locked(d, r, type);
    unsigned int n = 0;
    for (int i = 0; i < r->len; i++) {
        int pos = (r->head + i) % buffer_len;
        if (r->ts[pos] <= last_seen) continue;
        if (out) {
            if (n >= *count) break;
            out[n].timeStamp = r->ts[pos];
            out[n].sampleValue.ullVal = 0;
            out[n].sampleValue.uiVal = r->val[pos];
        }
        n++;
    }
    if (out && type == NVML_GPU_UTILIZATION_SAMPLES) util_samples_out += n;
    pthread_mutex_unlock(&L);
    *value_type = VT_UINT;
    if (n == 0) return NVML_ERROR_NOT_FOUND;
    *count = n;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t d, int n, nvmlFieldValue_t *v) {
    ENTER_DEV(d, "nvmlDeviceGetFieldValues");
    if (!v || n < 0) return NVML_ERROR_INVALID_ARGUMENT;
    struct dev *p = phys(d);
    double t = scen_t();
    long long ts = now_us();
    for (int i = 0; i < n; i++) {
        nvmlFieldValue_t *f = &v[i];
        f->timestamp = ts;
        f->latencyUsec = 0;
        f->nvmlReturn = NVML_SUCCESS;
        f->valueType = VT_ULL;
        f->value.ullVal = 0;
        int prop = -1;
        double scale = 1;
        switch (f->fieldId) {
        case FI_ECC_SBE_VOL_TOTAL: prop = P_ECC_CORR; break;
        case FI_ECC_DBE_VOL_TOTAL: prop = P_ECC_UNCORR; break;
        case FI_MEMORY_TEMP: prop = P_MEM_TEMP; f->valueType = VT_UINT; break;
        case FI_PCIE_REPLAY: prop = P_PCIE_REPLAY; break;
        case FI_NVLINK_CRC_FLIT_TOTAL: prop = P_NVLINK_CRC_FLIT; break;
        case FI_NVLINK_CRC_DATA_TOTAL: prop = P_NVLINK_CRC_DATA; break;
        case FI_NVLINK_REPLAY_TOTAL: prop = P_NVLINK_REPLAY; break;
        case FI_NVLINK_RECOVERY_TOTAL: prop = P_NVLINK_RECOVERY; break;
        case FI_NVLINK_DATA_TX: prop = P_NVLINK_TX; scale = 1.0 / 1024; break; /* KiB */
        case FI_NVLINK_DATA_RX: prop = P_NVLINK_RX; scale = 1.0 / 1024; break;
        case FI_REMAPPED_COR: prop = P_REMAP_CORR; f->valueType = VT_UINT; break;
        case FI_REMAPPED_UNC: prop = P_REMAP_UNCORR; f->valueType = VT_UINT; break;
        case FI_REMAPPED_PENDING: prop = P_REMAP_PENDING; f->valueType = VT_UINT; break;
        case FI_REMAPPED_FAILURE: f->valueType = VT_UINT; continue;
        case FI_PCIE_TX_BYTES: prop = P_PCIE_TX; break;
        case FI_PCIE_RX_BYTES: prop = P_PCIE_RX; break;
        case FI_POWER_INSTANT:
            if (!p->power_instant) { f->nvmlReturn = NVML_ERROR_NOT_SUPPORTED; continue; }
            prop = P_POWER; f->valueType = VT_UINT; scale = 1000; break;
        case FI_TOTAL_ENERGY:
            if (!p->has_prop[P_POWER]) { f->nvmlReturn = NVML_ERROR_NOT_SUPPORTED; continue; }
            f->value.ullVal = energy_mj(p);
            continue;
        default:
            f->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            continue;
        }
        if (!p->has_prop[prop]) { f->nvmlReturn = NVML_ERROR_NOT_SUPPORTED; continue; }
        double x = prop_at(p, prop, t) * scale;
        if (f->valueType == VT_UINT) f->value.uiVal = (unsigned)x;
        else f->value.ullVal = (unsigned long long)x;
    }
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------ processes (none) */

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_t *p) {
    ENTER_DEV(d, "nvmlDeviceGetComputeRunningProcesses_v3");
    (void)p;
    if (!n) return NVML_ERROR_INVALID_ARGUMENT;
    *n = 0;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int *n, nvmlProcessInfo_t *p) {
    ENTER_DEV(d, "nvmlDeviceGetGraphicsRunningProcesses_v3");
    (void)p;
    if (!n) return NVML_ERROR_INVALID_ARGUMENT;
    *n = 0;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------ misc state exporters read */

UINT_GETTER(nvmlDeviceGetPerformanceState, 0, 0)
UINT_GETTER(nvmlDeviceGetPersistenceMode, 0, 1)
UINT_GETTER(nvmlDeviceGetDisplayMode, 0, 0)
UINT_GETTER(nvmlDeviceGetDisplayActive, 0, 0)
UINT_GETTER(nvmlDeviceGetComputeMode, 0, 0)

EXPORT nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t d, int counter, unsigned int *kbps) {
    ENTER_DEV(d, "nvmlDeviceGetPcieThroughput");
    if (!kbps) return NVML_ERROR_INVALID_ARGUMENT;
    struct dev *p = phys(d);
    int prop = counter == 0 ? P_PCIE_TX : P_PCIE_RX;
    double t = scen_t();
    *kbps = (unsigned)((prop_at(p, prop, t + 0.5) - prop_at(p, prop, t - 0.5)) / 1024.0);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t d, unsigned int *cur, unsigned int *pending) {
    ENTER_DEV(d, "nvmlDeviceGetEccMode");
    if (!cur || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    *cur = *pending = 1;
    return NVML_SUCCESS;
}

static nvmlReturn_t coder_util(struct dev *d, unsigned int *u, unsigned int *period) {
    if (!u || !period) return NVML_ERROR_INVALID_ARGUMENT;
    (void)d;
    *u = 0;
    *period = 167000;
    return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t d, unsigned int *u, unsigned int *period) {
    ENTER_DEV(d, "nvmlDeviceGetEncoderUtilization");
    return coder_util(d, u, period);
}
EXPORT nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t d, unsigned int *u, unsigned int *period) {
    ENTER_DEV(d, "nvmlDeviceGetDecoderUtilization");
    return coder_util(d, u, period);
}

/* ------------------------------------------------------------ events (XID) */

EXPORT nvmlReturn_t nvmlEventSetCreate(event_set_t **out) {
    ENTER_SYS("nvmlEventSetCreate");
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&L);
    for (int i = 0; i < MAX_SETS; i++) {
        if (!sets[i].used) {
            memset(&sets[i], 0, sizeof sets[i]);
            sets[i].used = 1;
            *out = &sets[i];
            pthread_mutex_unlock(&L);
            return NVML_SUCCESS;
        }
    }
    pthread_mutex_unlock(&L);
    return NVML_ERROR_UNKNOWN;
}

EXPORT nvmlReturn_t nvmlEventSetFree(event_set_t *s) {
    ENTER_SYS("nvmlEventSetFree");
    if (!s || s < sets || s >= sets + MAX_SETS) return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&L);
    s->used = 0;
    pthread_mutex_unlock(&L);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t d, unsigned long long *types) {
    ENTER_DEV(d, "nvmlDeviceGetSupportedEventTypes");
    if (!types) return NVML_ERROR_INVALID_ARGUMENT;
    *types = NVML_EVENT_TYPE_XID | 0x1 | 0x2 | 0x4;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t d, unsigned long long types, event_set_t *s) {
    ENTER_DEV(d, "nvmlDeviceRegisterEvents");
    if (!s || s < sets || s >= sets + MAX_SETS || !s->used || d->is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    if (types & NVML_EVENT_TYPE_XID) s->registered[d->index] = 1;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlEventSetWait_v2(event_set_t *s, nvmlEventData_t *data, unsigned int timeout_ms) {
    static int _sid = -1;
    count_call(&_sid, "nvmlEventSetWait_v2", 0);
    if (refcount <= 0) return NVML_ERROR_UNINITIALIZED;
    if (!s || !data || s < sets || s >= sets + MAX_SETS || !s->used) return NVML_ERROR_INVALID_ARGUMENT;
    long long deadline = now_us() + (long long)timeout_ms * 1000;
    for (;;) {
        pthread_mutex_lock(&L);
        double t = scen_t();
        int best = -1;
        for (int i = 0; i < nxids; i++) {
            if (s->delivered[i] || xids[i].at > t || xids[i].gpu >= ngpus || !s->registered[xids[i].gpu]) continue;
            if (best < 0 || xids[i].at < xids[best].at) best = i;
        }
        if (best >= 0) {
            s->delivered[best] = 1;
            data->device = &gpus[xids[best].gpu];
            data->eventType = NVML_EVENT_TYPE_XID;
            data->eventData = xids[best].code;
            data->gpuInstanceId = xids[best].gi;
            data->computeInstanceId = xids[best].gi == 0xFFFFFFFFu ? 0xFFFFFFFFu : 0;
            pthread_mutex_unlock(&L);
            return NVML_SUCCESS;
        }
        /* like the driver, block until the next event or the deadline, without spinning */
        long long wake = deadline;
        for (int i = 0; i < nxids; i++) {
            if (s->delivered[i] || xids[i].gpu >= ngpus || !s->registered[xids[i].gpu]) continue;
            long long at = epoch_us + (long long)(xids[i].at * 1e6);
            if (at < wake) wake = at;
        }
        pthread_mutex_unlock(&L);
        long long left = wake - now_us();
        if (deadline - now_us() <= 0) return NVML_ERROR_TIMEOUT;
        if (left > 0) {
            struct timespec ts = { (time_t)(left / 1000000), (long)(left % 1000000) * 1000 };
            nanosleep(&ts, NULL);
        }
        if (refcount <= 0) return NVML_ERROR_UNINITIALIZED;
    }
}
EXPORT nvmlReturn_t nvmlEventSetWait(event_set_t *s, nvmlEventData_t *data, unsigned int timeout_ms) {
    return nvmlEventSetWait_v2(s, data, timeout_ms);
}

/* ------------------------------------------------------------ GPM */

EXPORT nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t d, nvmlGpmSupport_t *s) {
    ENTER_DEV(d, "nvmlGpmQueryDeviceSupport");
    if (!s) return NVML_ERROR_INVALID_ARGUMENT;
    struct dev *p = phys(d);
    s->isSupportedDevice = p->gpm && p->arch >= 9;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpmSampleAlloc(struct gpm_sample **out) {
    ENTER_SYS("nvmlGpmSampleAlloc");
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    *out = calloc(1, sizeof(struct gpm_sample));
    return *out ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

EXPORT nvmlReturn_t nvmlGpmSampleFree(struct gpm_sample *s) {
    ENTER_SYS("nvmlGpmSampleFree");
    free(s);
    return NVML_SUCCESS;
}

static nvmlReturn_t gpm_take(struct dev *d, struct gpm_sample *s) {
    if (!s) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->gpm || d->arch < 9) return NVML_ERROR_NOT_SUPPORTED;
    s->d = d;
    s->t = scen_t();
    s->taken = 1;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t d, struct gpm_sample *s) {
    ENTER_DEV(d, "nvmlGpmSampleGet");
    if (d->is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    return gpm_take(d, s);
}

EXPORT nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t d, unsigned int gi, struct gpm_sample *s) {
    ENTER_DEV(d, "nvmlGpmMigSampleGet");
    if (d->is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < d->mig_count; i++) {
        if (d->mig[i]->gi == gi) {
            nvmlReturn_t r = gpm_take(d, s);
            if (r == NVML_SUCCESS) { s->d = d->mig[i]; s->gi = gi; }
            return r;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *m) {
    ENTER_SYS("nvmlGpmMetricsGet");
    if (!m || !m->sample1 || !m->sample2 || !m->sample1->taken || !m->sample2->taken) return NVML_ERROR_INVALID_ARGUMENT;
    if (m->sample1->d != m->sample2->d) return NVML_ERROR_INVALID_ARGUMENT;
    struct dev *d = m->sample1->d;
    double t1 = m->sample1->t, t2 = m->sample2->t;
    if (t1 > t2) { double x = t1; t1 = t2; t2 = x; }
    for (unsigned i = 0; i < m->numMetrics; i++) {
        nvmlGpmMetric_t *x = &m->metrics[i];
        x->nvmlReturn = NVML_SUCCESS;
        memset(&x->metricInfo, 0, sizeof x->metricInfo);
        switch (x->metricId) {
        case GPM_GRAPHICS_UTIL: x->value = 100.0 * prop_mean(d, P_UTIL, t1, t2); break;
        case GPM_SM_UTIL: x->value = 100.0 * prop_mean(d, P_SM, t1, t2); break;
        case GPM_SM_OCCUPANCY: x->value = 50.0 * prop_mean(d, P_SM, t1, t2); break;
        default: x->nvmlReturn = NVML_ERROR_NOT_SUPPORTED; x->value = 0;
        }
    }
    return NVML_SUCCESS;
}
