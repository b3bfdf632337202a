/* Layout checks of the webgpu.h structs wgml passes to the runtime, and instance creation,
   whose descriptor differs between the two runtimes (see webgpu_abi.h). */
#include "webgpu_abi.h"

#include <stddef.h>

#define ABI_CHECK(cond) _Static_assert(cond, "webgpu.h drifted from the layout the runtime expects: " #cond)

/* LP64 layouts of the header whose calls were verified against the pinned runtime. */
ABI_CHECK(sizeof(void *) == 8);
ABI_CHECK(sizeof(WGPUStringView) == 16);
ABI_CHECK(sizeof(WGPUChainedStruct) == 16);
ABI_CHECK(offsetof(WGPUAdapterInfo, backendType) == 72);
ABI_CHECK(offsetof(WGPUAdapterInfo, subgroupMinSize) == 88);
ABI_CHECK(sizeof(WGPUAdapterInfo) == 96);
ABI_CHECK(offsetof(WGPULimits, maxStorageBufferBindingSize) == 72);
ABI_CHECK(offsetof(WGPULimits, maxBufferSize) == 96);
ABI_CHECK(offsetof(WGPULimits, maxComputeWorkgroupStorageSize) == 124);
ABI_CHECK(offsetof(WGPULimits, maxComputeWorkgroupsPerDimension) == 144);
ABI_CHECK(sizeof(WGPULimits) == 152);
ABI_CHECK(sizeof(WGPUDeviceDescriptor) == 144);
ABI_CHECK(offsetof(WGPUDeviceDescriptor, deviceLostCallbackInfo) == 72);
ABI_CHECK(offsetof(WGPUDeviceDescriptor, uncapturedErrorCallbackInfo) == 112);
ABI_CHECK(sizeof(WGPURequestAdapterOptions) == 32);
ABI_CHECK(sizeof(WGPUDawnTogglesDescriptor) == 48);
ABI_CHECK(sizeof(WGPUBufferDescriptor) == 48);
ABI_CHECK(sizeof(WGPUBindGroupEntry) == 56);
ABI_CHECK(sizeof(WGPUBindGroupLayoutEntry) == 120);
ABI_CHECK(sizeof(WGPUComputePipelineDescriptor) == 80);
ABI_CHECK(sizeof(WGPUConstantEntry) == 32);
ABI_CHECK(sizeof(WGPUFutureWaitInfo) == 16);
ABI_CHECK(sizeof(WGPUBindGroupLayoutDescriptor) == 40);
ABI_CHECK(sizeof(WGPUBindGroupDescriptor) == 48);
ABI_CHECK(sizeof(WGPUPipelineLayoutDescriptor) == 48);
ABI_CHECK(sizeof(WGPUShaderSourceWGSL) == 32);
ABI_CHECK(sizeof(WGPUBufferMapCallbackInfo) == 40);
ABI_CHECK(sizeof(WGPUQuerySetDescriptor) == 32);
ABI_CHECK(sizeof(WGPUPassTimestampWrites) == 24);
ABI_CHECK(WGPUBufferBindingType_ReadOnlyStorage == 4);
ABI_CHECK(WGPUCallbackMode_WaitAnyOnly == 1);
ABI_CHECK(WGPUBackendType_Vulkan == 6);
ABI_CHECK(WGPUAdapterType_CPU == 3);
ABI_CHECK(WGPUErrorType_OutOfMemory == 3);
ABI_CHECK(WGPUWaitStatus_TimedOut == 2);
ABI_CHECK(WGPUSType_ShaderSourceWGSL == 2);
ABI_CHECK(WGPUSType_DawnTogglesDescriptor == 0x0005000A);
ABI_CHECK(WGPUStatus_Success == 1);

#if defined(WGML_RUNTIME_NPM)
/* The runtime's instance descriptor: { nextInChain, WGPUInstanceCapabilities }. */
typedef struct {
    WGPUChainedStruct *next;
    WGPUBool timed_wait_any_enable;
    size_t timed_wait_any_max_count;
} legacy_instance_capabilities;
typedef struct {
    WGPUChainedStruct *next;
    legacy_instance_capabilities features;
} legacy_instance_descriptor;

WGPUInstance wgml__create_instance(void)
{
    legacy_instance_descriptor d = { .features = { .timed_wait_any_enable = 1 } };
    return wgpuCreateInstance((const WGPUInstanceDescriptor *)(const void *)&d);
}
#else
/* allow_unsafe_apis: current Dawn lists subgroup-matrix configurations only with it (on
   the instance and the adapter: see wgml__adapter_toggles). */
WGPUInstance wgml__create_instance(void)
{
    WGPUInstanceFeatureName timed = WGPUInstanceFeatureName_TimedWaitAny;
    static const char *const unsafe[] = { "allow_unsafe_apis" };
    WGPUDawnTogglesDescriptor toggles = { .chain = { .sType = WGPUSType_DawnTogglesDescriptor }, .enabledToggleCount = 1,
                                          .enabledToggles = unsafe };
    WGPUInstanceDescriptor d = { .nextInChain = &toggles.chain, .requiredFeatureCount = 1, .requiredFeatures = &timed };
    return wgpuCreateInstance(&d);
}
#endif

const WGPUChainedStruct *wgml__adapter_toggles(void)
{
#if defined(WGML_RUNTIME_NPM)
    return NULL;   /* the pinned runtime predates both toggles' purpose: ask it as before */
#else
    /* vulkan_enable_f16_on_nvidia: Dawn offers shader-f16 on NVIDIA's Vulkan driver only when
       asked (since 2025-10-27); allow_unsafe_apis: the subgroup-matrix configurations are
       checked against the adapter's toggles. Unknown toggles are ignored. */
    static const char *const names[] = { "vulkan_enable_f16_on_nvidia", "allow_unsafe_apis" };
    static const WGPUDawnTogglesDescriptor toggles = { .chain = { .sType = WGPUSType_DawnTogglesDescriptor },
                                                       .enabledToggleCount = 2, .enabledToggles = names };
    return &toggles.chain;
#endif
}
