/* Every adapter of the runtime, through Dawn's own enumeration.

   The webgpu.h C API has no enumeration: wgpuInstanceRequestAdapter returns one adapter
   per request, so two identical GPUs of one machine look like one. Dawn's C++ API has
   dawn::native::Instance::EnumerateAdapters, one adapter per physical device, and both
   runtimes wgml runs on export it (with the Adapter methods it needs). It is reached here
   by its symbol, with the Itanium C++ ABI's conventions written out, so that wgml stays C:
     std::vector<dawn::native::Adapter>
         dawn::native::Instance::EnumerateAdapters(const WGPURequestAdapterOptions *) const
   returns its vector through a hidden first argument, `this` second; Instance and Adapter
   each hold one pointer (their InstanceBase / AdapterBase, which is the WGPUInstance /
   WGPUAdapter handle); libstdc++'s vector is three pointers; each Adapter is destroyed
   (one reference released) and the vector's storage freed with operator delete. Where a
   runtime lacks any of these symbols, or answers with something that cannot be a vector
   of adapters, the caller uses the request-per-preference scheme instead. */
#define _GNU_SOURCE
#include "webgpu_abi.h"

#include <dlfcn.h>
#include <stdint.h>

typedef struct dn_handle { void *impl; } dn_handle;   /* dawn::native::Instance, ::Adapter */
typedef struct dn_vector { dn_handle *begin, *end, *cap; } dn_vector;
typedef void (*enumerate_fn)(dn_vector *ret, const dn_handle *self, const WGPURequestAdapterOptions *options);
typedef void (*adapter_dtor_fn)(dn_handle *self);
typedef void (*delete_fn)(void *p);

#define MAX_ENUMERATED 256

int wgml__enumerate_adapters(WGPUInstance instance, const WGPURequestAdapterOptions *options, WGPUAdapter *out, int cap)
{
    enumerate_fn enumerate =
        (enumerate_fn)dlsym(RTLD_DEFAULT, "_ZNK4dawn6native8Instance17EnumerateAdaptersEPK25WGPURequestAdapterOptions");
    adapter_dtor_fn release = (adapter_dtor_fn)dlsym(RTLD_DEFAULT, "_ZN4dawn6native7AdapterD1Ev");
    delete_fn del = (delete_fn)dlsym(RTLD_DEFAULT, "_ZdlPv");
    if (!enumerate || !release || !del || !instance) return -1;
    dn_handle self = { instance };
    dn_vector v = { NULL, NULL, NULL };
    enumerate(&v, &self, options);
    size_t n = (size_t)(v.end - v.begin);
    if ((v.begin == NULL) != (v.end == NULL) || v.end < v.begin || v.cap < v.end || n > MAX_ENUMERATED) return -1;
    int kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (v.begin[i].impl && kept < cap) {
            out[kept] = (WGPUAdapter)v.begin[i].impl;
            wgpuAdapterAddRef(out[kept++]);
        }
        release(&v.begin[i]);
    }
    if (v.begin) del(v.begin);
    return kept;
}
