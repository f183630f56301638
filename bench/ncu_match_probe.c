/* Which NVTX ranges does ncu's --nvtx-include match in range replay?
 * bench/ncu_match_probe.sh builds this and counts ncu's log lines.
 *
 * ncu_match_probe N: N times, each range around a little CPU work and a CUDA
 * driver call (cuDeviceGetCount: without one, ncu defines no range of a named
 * domain, and ends no range); with NOCUDA set, no driver call inside ranges.
 *   push/pop  A > A1, then B              (default domain, ASCII)
 *   push/pop  LLM: decode_all > decode_step  (registered strings, as the nvtx crate makes them)
 *   push/pop  ASC: outer > inner          (ASCII messages)
 *   start/end se:range                    (a ':' in the name)
 *   push/pop  ASC: twin, twin             (back to back: no CUDA call between them)
 * and one CUDA call after the loop, outside every range (not with NOTAIL set).
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <nvtx3/nvToolsExt.h>

typedef int (*cu_init_t)(unsigned);
typedef int (*cu_count_t)(int *);
static cu_count_t cu_count;

static void work(void) {
  volatile double x = 0;
  for (int i = 0; i < 100000; i++) x += i;
  int n;
  if (cu_count) cu_count(&n);
}

static nvtxEventAttributes_t attributes(void) {
  nvtxEventAttributes_t a;
  memset(&a, 0, sizeof a);
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  return a;
}

int main(int argc, char **argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 3;
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
  if (cuda) {
    cu_init_t init = (cu_init_t)dlsym(cuda, "cuInit");
    if (init) init(0); /* outside every range: cuInit is unsupported inside one */
    if (!getenv("NOCUDA")) cu_count = (cu_count_t)dlsym(cuda, "cuDeviceGetCount");
  }
  nvtxDomainHandle_t llm = nvtxDomainCreateA("LLM");
  nvtxDomainHandle_t asc = nvtxDomainCreateA("ASC");
  for (int it = 0; it < iters; it++) {
    nvtxRangePushA("A"); work();
    nvtxRangePushA("A1"); work(); nvtxRangePop();
    nvtxRangePop();
    nvtxRangePushA("B"); work(); nvtxRangePop();

    nvtxEventAttributes_t r = attributes();
    r.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    r.message.registered = nvtxDomainRegisterStringA(llm, "decode_all");
    nvtxDomainRangePushEx(llm, &r); work();
    r.message.registered = nvtxDomainRegisterStringA(llm, "decode_step");
    nvtxDomainRangePushEx(llm, &r); work(); nvtxDomainRangePop(llm);
    nvtxDomainRangePop(llm);

    nvtxEventAttributes_t a = attributes();
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = "outer";
    nvtxDomainRangePushEx(asc, &a); work();
    a.message.ascii = "inner";
    nvtxDomainRangePushEx(asc, &a); work(); nvtxDomainRangePop(asc);
    nvtxDomainRangePop(asc);

    nvtxRangeId_t id = nvtxRangeStartA("se:range"); work(); nvtxRangeEnd(id);

    a.message.ascii = "twin";
    nvtxDomainRangePushEx(asc, &a); work(); nvtxDomainRangePop(asc);
    nvtxDomainRangePushEx(asc, &a); work(); nvtxDomainRangePop(asc);
  }
  if (!getenv("NOTAIL")) work(); /* a CUDA call outside every range ends the last one */
  return 0;
}
