/* A fake libnvidia-ml.so.1 for tests without a GPU: the real pynvml (nvidia-ml-py) loads it through
 * LD_LIBRARY_PATH and calls these entry points exactly as it calls the driver's. Grown from
 * /work/shared/recipes/nvml/fake_nvml.c with every entry point the agent's NVIDIA reader uses.
 *
 * Environment (lists are per card index, comma separated):
 *   FAKE_NVML_GPUS=N              cards (default 4)
 *   FAKE_NVML_INIT_ERROR=<code>   nvmlInit fails with this nvmlReturn_t (e.g. 9 = driver not loaded)
 *   FAKE_NVML_UTIL=u0,u1,...      GPU utilization % (default 0)
 *   FAKE_NVML_POWER_W=p0,...      power draw in W (default 60)
 *   FAKE_NVML_TEMP_C=t0,...       GPU temperature in C (default 40)
 *   FAKE_NVML_MEM_TOTAL_MIB=m     memory per card in MiB (default 81920)
 *   FAKE_NVML_MEM_USED_MIB=m0,... memory used in MiB (default 1024)
 *   FAKE_NVML_ECC_UNCORRECTED=e0,... volatile uncorrected ECC errors; unset: ECC not supported
 *   FAKE_NVML_LOST=i0,...         cards whose every query fails with GPU_IS_LOST (15)
 *
 * Built with -DFAKE_NVML_FROM_DEVICES, as the copy installed as a test server's driver is (see
 * tests/agent_server.py install_fake_driver), its cards are instead the /dev/nvidiaN character
 * devices present, as the driver sees them from a container: index 0.. in N's order, minor number
 * and UUID from each device's real minor (st_rdev), so a card bound into a host as /dev/nvidia0
 * keeps the server's UUID. FAKE_NVML_GPUS is then ignored.
 *
 * Build: gcc -shared -fPIC -o libnvidia-ml.so.1 fake_nvml.c */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

enum { NVML_SUCCESS = 0, NVML_ERROR_INVALID_ARGUMENT = 2, NVML_ERROR_NOT_SUPPORTED = 3,
       NVML_ERROR_GPU_IS_LOST = 15 };
enum { NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1 };

typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;

enum { MAX_CARDS = 64 };
static int device_minors[MAX_CARDS], devices_found = -1;

static int by_number(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* The /dev/nvidiaN character devices, in N's order; their real minors in device_minors. */
static int scan_devices(void) {
  if (devices_found >= 0) return devices_found;
  int numbers[MAX_CARDS], n = 0;
  DIR *dev = opendir("/dev");
  for (struct dirent *e; dev && (e = readdir(dev)) && n < MAX_CARDS;) {
    char *end; long number;
    if (strncmp(e->d_name, "nvidia", 6) || e->d_name[6] < '0' || e->d_name[6] > '9') continue;
    number = strtol(e->d_name + 6, &end, 10);
    if (*end == 0) numbers[n++] = (int)number;
  }
  if (dev) closedir(dev);
  qsort(numbers, n, sizeof *numbers, by_number);
  devices_found = 0;
  for (int i = 0; i < n; i++) {
    char path[32]; struct stat st;
    snprintf(path, sizeof path, "/dev/nvidia%d", numbers[i]);
    if (stat(path, &st) == 0 && S_ISCHR(st.st_mode)) device_minors[devices_found++] = (int)minor(st.st_rdev);
  }
  return devices_found;
}

#ifdef FAKE_NVML_FROM_DEVICES
static int from_devices(void) { return 1; }
#else
static int from_devices(void) { return 0; }
#endif
static int count(void) {
  if (from_devices()) return scan_devices();
  const char *s = getenv("FAKE_NVML_GPUS"); return s ? atoi(s) : 4;
}

/* The idx-th entry of a comma-separated list in `var`, or `dflt`. */
static unsigned long long pick(const char *var, unsigned idx, unsigned long long dflt) {
  const char *s = getenv(var); if (!s) return dflt;
  char buf[512]; strncpy(buf, s, sizeof buf - 1); buf[sizeof buf - 1] = 0;
  unsigned i = 0;
  for (char *t = strtok(buf, ","); t; t = strtok(NULL, ","), i++) if (i == idx) return strtoull(t, NULL, 10);
  return dflt;
}

static int idx_of(void *h) { return (int)((long)h - 1); }
/* The card's minor number, which its UUID is made of. */
static int minor_of(void *h) { return from_devices() ? device_minors[idx_of(h)] : idx_of(h); }

static int is_lost(void *h) {
  const char *s = getenv("FAKE_NVML_LOST"); if (!s) return 0;
  char buf[512]; strncpy(buf, s, sizeof buf - 1); buf[sizeof buf - 1] = 0;
  for (char *t = strtok(buf, ","); t; t = strtok(NULL, ","))
    if (atoi(t) == idx_of(h)) return 1;
  return 0;
}
#define CHECK_LOST(h) do { if (is_lost(h)) return NVML_ERROR_GPU_IS_LOST; } while (0)

int nvmlInitWithFlags(unsigned int f) { (void)f; const char *e = getenv("FAKE_NVML_INIT_ERROR"); return e ? atoi(e) : 0; }
int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
int nvmlInit(void) { return nvmlInitWithFlags(0); }
int nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(int r) { static char b[64]; snprintf(b, sizeof b, "fake NVML error %d", r); return b; }

int nvmlSystemGetDriverVersion(char *version, unsigned int len) { snprintf(version, len, "550.54.15-fake"); return 0; }

int nvmlDeviceGetCount_v2(unsigned int *c) { *c = (unsigned)count(); return 0; }
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void **h) {
  if ((int)i >= count()) return NVML_ERROR_INVALID_ARGUMENT;
  *h = (void *)(long)(i + 1); return 0;
}
int nvmlDeviceGetName(void *h, char *name, unsigned int len) {
  CHECK_LOST(h); snprintf(name, len, "NVIDIA A100-SXM4-80GB (fake %d)", idx_of(h)); return 0;
}
int nvmlDeviceGetUUID(void *h, char *uuid, unsigned int len) {
  CHECK_LOST(h); snprintf(uuid, len, "GPU-fa4e0000-0000-0000-0000-%012d", minor_of(h)); return 0;
}
int nvmlDeviceGetMinorNumber(void *h, unsigned int *minor) { CHECK_LOST(h); *minor = (unsigned)minor_of(h); return 0; }
int nvmlDeviceGetUtilizationRates(void *h, nvmlUtilization_t *u) {
  CHECK_LOST(h); u->gpu = (unsigned)pick("FAKE_NVML_UTIL", idx_of(h), 0); u->memory = u->gpu / 2; return 0;
}
int nvmlDeviceGetPowerUsage(void *h, unsigned int *mw) {
  CHECK_LOST(h); *mw = 1000 * (unsigned)pick("FAKE_NVML_POWER_W", idx_of(h), 60); return 0;
}
int nvmlDeviceGetTemperature(void *h, int sensor, unsigned int *temp) {
  (void)sensor; CHECK_LOST(h); *temp = (unsigned)pick("FAKE_NVML_TEMP_C", idx_of(h), 40); return 0;
}
int nvmlDeviceGetMemoryInfo(void *h, nvmlMemory_t *m) {
  CHECK_LOST(h);
  m->total = pick("FAKE_NVML_MEM_TOTAL_MIB", 0, 81920) << 20;
  m->used = pick("FAKE_NVML_MEM_USED_MIB", idx_of(h), 1024) << 20;
  m->free = m->total - m->used;
  return 0;
}
int nvmlDeviceGetTotalEccErrors(void *h, int error_type, int counter_type, unsigned long long *n) {
  (void)counter_type; CHECK_LOST(h);
  if (!getenv("FAKE_NVML_ECC_UNCORRECTED")) return NVML_ERROR_NOT_SUPPORTED;
  *n = error_type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED ? pick("FAKE_NVML_ECC_UNCORRECTED", idx_of(h), 0) : 0;
  return 0;
}
