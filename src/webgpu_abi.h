/*
 * The one place that knows how the WebGPU runtime we link differs from the webgpu.h we
 * compile against.
 *
 * The header comes from Debian's libwebgpu-dawn-dev (a 2026 Dawn). The runtime is either a
 * system Dawn that matches that header (WGML_RUNTIME_SYSTEM) or the pinned npm prebuilt
 * (WGML_RUNTIME_NPM, chosen by CMake after checking the library's SHA-256), which predates
 * upstream webgpu-headers change #551 (2025-06-26):
 *   - WGPUFeatureName was renumbered by that change: the runtime's values are below,
 *     established by requesting one feature at a time on a real adapter;
 *   - WGPUInstanceDescriptor then carried a WGPUInstanceCapabilities struct instead of a
 *     list of required instance features.
 * Every other struct and enum used by wgml has the same layout in both, which the
 * static assertions in webgpu_abi.c pin down: a future header that moves any of them
 * fails the build instead of corrupting calls.
 */
#ifndef WGML_WEBGPU_ABI_H
#define WGML_WEBGPU_ABI_H

#include <webgpu/webgpu.h>

#if defined(WGML_RUNTIME_NPM)
#define WGML_FEATURE_TIMESTAMP_QUERY ((WGPUFeatureName)0x03)
#define WGML_FEATURE_SHADER_F16      ((WGPUFeatureName)0x0A)
#define WGML_FEATURE_SUBGROUPS       ((WGPUFeatureName)0x11)
/* it lists subgroup-matrix configurations its shader compiler cannot use: never asked for */
#define WGML_HAS_SUBGROUP_MATRIX     0
#elif defined(WGML_RUNTIME_SYSTEM)
#define WGML_FEATURE_TIMESTAMP_QUERY WGPUFeatureName_TimestampQuery
#define WGML_FEATURE_SHADER_F16      WGPUFeatureName_ShaderF16
#define WGML_FEATURE_SUBGROUPS       WGPUFeatureName_Subgroups
#define WGML_HAS_SUBGROUP_MATRIX     1
#define WGML_FEATURE_SUBGROUP_MATRIX WGPUFeatureName_ChromiumExperimentalSubgroupMatrix
#else
#error "define WGML_RUNTIME_NPM or WGML_RUNTIME_SYSTEM (CMake does)"
#endif

/* Up to cap adapters of instance, one per physical device, each with a reference of its
   own (src/webgpu_enum.c): their count, or -1 where the runtime offers no enumeration. */
int wgml__enumerate_adapters(WGPUInstance instance, const WGPURequestAdapterOptions *options, WGPUAdapter *out, int cap);
/* Creates an instance with timed waits enabled (wgpuInstanceWaitAny with a timeout). */
/* The toggles to chain on every adapter request (NULL: none), as this runtime needs them. */
const WGPUChainedStruct *wgml__adapter_toggles(void);
WGPUInstance wgml__create_instance(void);

#endif
