/* A fake nvidia-smi for tests without a GPU: `nvidia-smi -L` as the real one prints it, from
 * whatever libnvidia-ml.so.1 the loader finds (the fake one, fake_nvml.c), so a test sees which
 * library a host resolves and which cards it reports.
 *
 * Build: gcc -o nvidia-smi fake_nvidia_smi.c -L<dir of libnvidia-ml.so.1> -l:libnvidia-ml.so.1 */
#include <stdio.h>
#include <string.h>

int nvmlInit_v2(void);
int nvmlDeviceGetCount_v2(unsigned int *count);
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **handle);
int nvmlDeviceGetName(void *handle, char *name, unsigned int length);
int nvmlDeviceGetUUID(void *handle, char *uuid, unsigned int length);

int main(int argc, char **argv) {
  unsigned int count = 0;
  if (argc != 2 || strcmp(argv[1], "-L")) { fprintf(stderr, "usage: nvidia-smi -L\n"); return 2; }
  if (nvmlInit_v2() || nvmlDeviceGetCount_v2(&count)) { fprintf(stderr, "NVML failed\n"); return 9; }
  for (unsigned int i = 0; i < count; i++) {
    void *handle; char name[96], uuid[96];
    if (nvmlDeviceGetHandleByIndex_v2(i, &handle) || nvmlDeviceGetName(handle, name, sizeof name) ||
        nvmlDeviceGetUUID(handle, uuid, sizeof uuid))
      return 15;
    printf("GPU %u: %s (UUID: %s)\n", i, name, uuid);
  }
  return 0;
}
