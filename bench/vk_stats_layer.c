/* A Vulkan layer that reports what the driver compiled for each compute pipeline: the
   statistics of VK_KHR_pipeline_executable_properties (on NVIDIA: registers, shared
   memory, ...) and, where the driver offers them, its internal representations (written
   to files). wgml's kernels go through Dawn, which hides the Vulkan pipeline; this layer
   sits between Dawn and the driver, so no wgml code changes to read them.

   Build:  cc -O2 -shared -fPIC -o libwgml_vk_stats.so bench/vk_stats_layer.c   (needs the
           Vulkan headers: Debian's libvulkan-dev)
   Use:    bench/kernel_stats.sh writes the manifest and runs a command under the layer.
   Output: one line per pipeline on stderr, "vkstats: <entry point> | <name>=<value> | ...",
           and with WGML_VK_STATS_DIR set, <dir>/<n>_<entry>_<representation>.txt and the
           pipeline's own pipeline-cache data, <dir>/<n>_<entry>_cache.bin.

   Only what a compute-only client needs is intercepted: instance and device creation
   (to enable the extension and its feature), compute pipeline creation (to ask for the
   statistics and print them), and the two proc-address queries.

   The device's robustness is reported once ("vkstats: device ..."): whether the client
   enabled robustBufferAccess or VK_EXT_robustness2's robustBufferAccess2. For measuring
   what the driver's own bounds checks cost, WGML_VK_PIPELINE_ROBUSTNESS=disabled also
   enables VK_EXT_pipeline_robustness and creates every compute pipeline with storage and
   uniform buffer robustness DISABLED (out-of-bounds accesses then undefined: timing only). */
#include <vulkan/vk_layer.h>
#include <vulkan/vulkan.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LAYER_NAME "VK_LAYER_WGML_kernel_stats"

static PFN_vkGetInstanceProcAddr next_gipa;
static PFN_vkGetDeviceProcAddr next_gdpa;
static PFN_vkCreateComputePipelines next_create_compute;
static PFN_vkGetPipelineExecutablePropertiesKHR next_exec_props;
static PFN_vkGetPipelineExecutableStatisticsKHR next_exec_stats;
static PFN_vkGetPipelineExecutableInternalRepresentationsKHR next_exec_ir;
static PFN_vkCreatePipelineCache next_create_cache;
static PFN_vkGetPipelineCacheData next_cache_data;
static PFN_vkDestroyPipelineCache next_destroy_cache;
static PFN_vkDestroyPipeline next_destroy_pipeline;
static VkDevice the_device;
static int enabled;         /* the device has the extension and the feature on */
static unsigned pipelines;  /* numbering of the dumped files */

static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateInstance(const VkInstanceCreateInfo *ci, const VkAllocationCallbacks *alloc,
                                                           VkInstance *instance)
{
    VkLayerInstanceCreateInfo *link = (VkLayerInstanceCreateInfo *)ci->pNext;
    while (link && !(link->sType == VK_STRUCTURE_TYPE_LOADER_INSTANCE_CREATE_INFO && link->function == VK_LAYER_LINK_INFO))
        link = (VkLayerInstanceCreateInfo *)link->pNext;
    if (!link) return VK_ERROR_INITIALIZATION_FAILED;
    next_gipa = link->u.pLayerInfo->pfnNextGetInstanceProcAddr;
    link->u.pLayerInfo = link->u.pLayerInfo->pNext;
    PFN_vkCreateInstance create = (PFN_vkCreateInstance)next_gipa(VK_NULL_HANDLE, "vkCreateInstance");
    return create(ci, alloc, instance);
}

static int has_extension(VkPhysicalDevice pd, VkInstance inst, const char *name)
{
    PFN_vkEnumerateDeviceExtensionProperties enumerate =
        (PFN_vkEnumerateDeviceExtensionProperties)next_gipa(inst, "vkEnumerateDeviceExtensionProperties");
    uint32_t n = 0;
    if (!enumerate || enumerate(pd, NULL, &n, NULL) != VK_SUCCESS) return 0;
    VkExtensionProperties *p = calloc(n, sizeof *p);
    int found = 0;
    if (p && enumerate(pd, NULL, &n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n; i++) found |= !strcmp(p[i].extensionName, name);
    free(p);
    return found;
}

static VkInstance last_instance;
static int robustness_off;   /* WGML_VK_PIPELINE_ROBUSTNESS=disabled took effect */

/* Adds extension name to mine (names: its array, with room) if the device has it; whether
   it is enabled now. */
static int add_extension(VkPhysicalDevice pd, VkDeviceCreateInfo *mine, const char **names, const char *name)
{
    for (uint32_t i = 0; i < mine->enabledExtensionCount; i++)
        if (!strcmp(names[i], name)) return 1;
    if (!has_extension(pd, last_instance, name)) return 0;
    names[mine->enabledExtensionCount++] = name;
    return 1;
}

static void report_robustness(const VkDeviceCreateInfo *ci)
{
    int rba = ci->pEnabledFeatures ? (int)ci->pEnabledFeatures->robustBufferAccess : 0, rba2 = 0, ext2 = 0;
    for (const VkBaseInStructure *n = ci->pNext; n; n = n->pNext) {
        if (n->sType == VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2)
            rba |= (int)((const VkPhysicalDeviceFeatures2 *)n)->features.robustBufferAccess;
        if (n->sType == VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ROBUSTNESS_2_FEATURES_EXT)
            rba2 |= (int)((const VkPhysicalDeviceRobustness2FeaturesEXT *)n)->robustBufferAccess2;
    }
    for (uint32_t i = 0; i < ci->enabledExtensionCount; i++) ext2 |= !strcmp(ci->ppEnabledExtensionNames[i], VK_EXT_ROBUSTNESS_2_EXTENSION_NAME);
    fprintf(stderr, "vkstats: device robustBufferAccess=%d robustBufferAccess2=%d (VK_EXT_robustness2 %s), %u extensions\n", rba, rba2,
            ext2 ? "enabled" : "not enabled", ci->enabledExtensionCount);
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateDevice(VkPhysicalDevice pd, const VkDeviceCreateInfo *ci,
                                                         const VkAllocationCallbacks *alloc, VkDevice *device)
{
    VkLayerDeviceCreateInfo *link = (VkLayerDeviceCreateInfo *)ci->pNext;
    while (link && !(link->sType == VK_STRUCTURE_TYPE_LOADER_DEVICE_CREATE_INFO && link->function == VK_LAYER_LINK_INFO))
        link = (VkLayerDeviceCreateInfo *)link->pNext;
    if (!link) return VK_ERROR_INITIALIZATION_FAILED;
    PFN_vkGetInstanceProcAddr gipa = link->u.pLayerInfo->pfnNextGetInstanceProcAddr;
    next_gdpa = link->u.pLayerInfo->pfnNextGetDeviceProcAddr;
    link->u.pLayerInfo = link->u.pLayerInfo->pNext;
    PFN_vkCreateDevice create = (PFN_vkCreateDevice)gipa(last_instance, "vkCreateDevice");

    report_robustness(ci);

    /* the extensions and their features, added to what the application asked for */
    VkDeviceCreateInfo mine = *ci;
    const char **names = calloc(ci->enabledExtensionCount + 2, sizeof *names);
    if (!names) return VK_ERROR_OUT_OF_HOST_MEMORY;
    for (uint32_t i = 0; i < ci->enabledExtensionCount; i++) names[i] = ci->ppEnabledExtensionNames[i];
    mine.ppEnabledExtensionNames = names;
    VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR feat = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR,
        .pNext = (void *)mine.pNext,
        .pipelineExecutableInfo = VK_TRUE,
    };
    int avail = add_extension(pd, &mine, names, VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
    if (avail) mine.pNext = &feat;
    VkPhysicalDevicePipelineRobustnessFeaturesEXT rob = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_ROBUSTNESS_FEATURES_EXT,
        .pNext = (void *)mine.pNext,
        .pipelineRobustness = VK_TRUE,
    };
    const char *want = getenv("WGML_VK_PIPELINE_ROBUSTNESS");
    if (want && !strcmp(want, "disabled")) {
        robustness_off = add_extension(pd, &mine, names, VK_EXT_PIPELINE_ROBUSTNESS_EXTENSION_NAME);
        if (robustness_off) mine.pNext = &rob;
        fprintf(stderr, "vkstats: pipeline robustness %s\n",
                robustness_off ? "DISABLED for storage and uniform buffers" : "unavailable (the driver lacks the extension)");
    }
    VkResult r = create(pd, &mine, alloc, device);
    free(names);
    if (r != VK_SUCCESS) return r;
    the_device = *device;
    next_create_compute = (PFN_vkCreateComputePipelines)next_gdpa(*device, "vkCreateComputePipelines");
    if (avail) {
        next_exec_props = (PFN_vkGetPipelineExecutablePropertiesKHR)next_gdpa(*device, "vkGetPipelineExecutablePropertiesKHR");
        next_exec_stats = (PFN_vkGetPipelineExecutableStatisticsKHR)next_gdpa(*device, "vkGetPipelineExecutableStatisticsKHR");
        next_exec_ir = (PFN_vkGetPipelineExecutableInternalRepresentationsKHR)next_gdpa(
            *device, "vkGetPipelineExecutableInternalRepresentationsKHR");
    }
    next_create_cache = (PFN_vkCreatePipelineCache)next_gdpa(*device, "vkCreatePipelineCache");
    next_cache_data = (PFN_vkGetPipelineCacheData)next_gdpa(*device, "vkGetPipelineCacheData");
    next_destroy_cache = (PFN_vkDestroyPipelineCache)next_gdpa(*device, "vkDestroyPipelineCache");
    next_destroy_pipeline = (PFN_vkDestroyPipeline)next_gdpa(*device, "vkDestroyPipeline");
    enabled = avail && next_exec_props && next_exec_stats;
    fprintf(stderr, "vkstats: %s\n", enabled ? "pipeline statistics on" : "the driver lacks " VK_KHR_PIPELINE_EXECUTABLE_PROPERTIES_EXTENSION_NAME);
    return VK_SUCCESS;
}

static void print_stat(const VkPipelineExecutableStatisticKHR *s)
{
    switch (s->format) {
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR: fprintf(stderr, " | %s=%s", s->name, s->value.b32 ? "yes" : "no"); break;
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR: fprintf(stderr, " | %s=%lld", s->name, (long long)s->value.i64); break;
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR:
        fprintf(stderr, " | %s=%llu", s->name, (unsigned long long)s->value.u64);
        break;
    case VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_FLOAT64_KHR: fprintf(stderr, " | %s=%g", s->name, s->value.f64); break;
    default: break;
    }
}

static void dump_ir(const VkPipelineExecutableInfoKHR *info, const char *entry, unsigned n)
{
    const char *dir = getenv("WGML_VK_STATS_DIR");
    uint32_t count = 0;
    if (!dir || !next_exec_ir || next_exec_ir(the_device, info, &count, NULL) != VK_SUCCESS || !count) return;
    VkPipelineExecutableInternalRepresentationKHR *ir = calloc(count, sizeof *ir);
    if (!ir) return;
    for (uint32_t i = 0; i < count; i++) ir[i].sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INTERNAL_REPRESENTATION_KHR;
    if (next_exec_ir(the_device, info, &count, ir) == VK_SUCCESS) {
        for (uint32_t i = 0; i < count; i++) ir[i].pData = malloc(ir[i].dataSize);
        if (next_exec_ir(the_device, info, &count, ir) == VK_SUCCESS)
            for (uint32_t i = 0; i < count; i++) {
                if (!ir[i].pData) continue;   /* out of memory: that one is not written */
                char path[1024], name[VK_MAX_DESCRIPTION_SIZE];
                snprintf(name, sizeof name, "%s", ir[i].name);
                for (char *c = name; *c; c++)
                    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9'))) *c = '_';
                snprintf(path, sizeof path, "%s/%03u_%s_%s.%s", dir, n, entry, name, ir[i].isText ? "txt" : "bin");
                FILE *f = fopen(path, "wb");
                if (f) {
                    fwrite(ir[i].pData, 1, ir[i].isText && ir[i].dataSize ? ir[i].dataSize - 1 : ir[i].dataSize, f);
                    fclose(f);
                }
            }
        for (uint32_t i = 0; i < count; i++) free(ir[i].pData);
    }
    free(ir);
}

static void report(VkPipeline pipeline, const char *entry)
{
    unsigned n = pipelines++;
    VkPipelineInfoKHR pinfo = { .sType = VK_STRUCTURE_TYPE_PIPELINE_INFO_KHR, .pipeline = pipeline };
    uint32_t count = 0;
    if (next_exec_props(the_device, &pinfo, &count, NULL) != VK_SUCCESS) return;
    for (uint32_t e = 0; e < count; e++) {
        VkPipelineExecutableInfoKHR info = { .sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_INFO_KHR, .pipeline = pipeline,
                                             .executableIndex = e };
        uint32_t ns = 0;
        if (next_exec_stats(the_device, &info, &ns, NULL) != VK_SUCCESS) continue;
        VkPipelineExecutableStatisticKHR *st = calloc(ns ? ns : 1, sizeof *st);
        if (!st) continue;
        for (uint32_t i = 0; i < ns; i++) st[i].sType = VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR;
        if (next_exec_stats(the_device, &info, &ns, st) == VK_SUCCESS) {
            fprintf(stderr, "vkstats: %03u %s", n, entry);
            for (uint32_t i = 0; i < ns; i++) print_stat(&st[i]);
            fprintf(stderr, "\n");
        }
        free(st);
        dump_ir(&info, entry, n);
    }
}

/* With WGML_VK_STATS_DIR: the pipeline built once more into an empty pipeline cache of its
   own, whose data (the driver's format, after the standard header) is written to
   <dir>/<n>_<entry>_cache.bin: the only place where a driver that offers no internal
   representations may still show its binary. */
static void dump_cache(VkDevice device, const VkComputePipelineCreateInfo *ci, unsigned n)
{
    const char *dir = getenv("WGML_VK_STATS_DIR");
    if (!dir || !next_create_cache || !next_cache_data || !next_destroy_cache || !next_destroy_pipeline) return;
    VkPipelineCacheCreateInfo cci = { .sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO };
    VkPipelineCache cache;
    if (next_create_cache(device, &cci, NULL, &cache) != VK_SUCCESS) return;
    VkPipeline p;
    if (next_create_compute(device, cache, 1, ci, NULL, &p) == VK_SUCCESS) {
        next_destroy_pipeline(device, p, NULL);
        size_t size = 0;
        void *data = NULL;
        if (next_cache_data(device, cache, &size, NULL) == VK_SUCCESS && size && (data = malloc(size)) &&
            next_cache_data(device, cache, &size, data) == VK_SUCCESS) {
            char path[1024];
            snprintf(path, sizeof path, "%s/%03u_%s_cache.bin", dir, n, ci->stage.pName ? ci->stage.pName : "x");
            FILE *f = fopen(path, "wb");
            if (f) {
                fwrite(data, 1, size, f);
                fclose(f);
            }
        }
        free(data);
    }
    next_destroy_cache(device, cache, NULL);
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateComputePipelines(VkDevice device, VkPipelineCache cache, uint32_t n,
                                                                   const VkComputePipelineCreateInfo *ci,
                                                                   const VkAllocationCallbacks *alloc, VkPipeline *out)
{
    VkComputePipelineCreateInfo *mine = calloc(n ? n : 1, sizeof *mine);
    VkPipelineRobustnessCreateInfoEXT *rob = calloc(n ? n : 1, sizeof *rob);
    if (!mine || !rob) {   /* no statistics, no failure */
        free(mine);
        free(rob);
        return next_create_compute(device, cache, n, ci, alloc, out);
    }
    for (uint32_t i = 0; i < n; i++) {
        mine[i] = ci[i];
        if (enabled) mine[i].flags |= VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR;
        if (enabled && getenv("WGML_VK_STATS_DIR")) mine[i].flags |= VK_PIPELINE_CREATE_CAPTURE_INTERNAL_REPRESENTATIONS_BIT_KHR;
        if (robustness_off) {
            rob[i] = (VkPipelineRobustnessCreateInfoEXT){
                .sType = VK_STRUCTURE_TYPE_PIPELINE_ROBUSTNESS_CREATE_INFO_EXT,
                .pNext = ci[i].pNext,
                .storageBuffers = VK_PIPELINE_ROBUSTNESS_BUFFER_BEHAVIOR_DISABLED_EXT,
                .uniformBuffers = VK_PIPELINE_ROBUSTNESS_BUFFER_BEHAVIOR_DISABLED_EXT,
                .vertexInputs = VK_PIPELINE_ROBUSTNESS_BUFFER_BEHAVIOR_DEVICE_DEFAULT_EXT,
                .images = VK_PIPELINE_ROBUSTNESS_IMAGE_BEHAVIOR_DEVICE_DEFAULT_EXT,
            };
            mine[i].pNext = &rob[i];
        }
    }
    VkResult r = next_create_compute(device, cache, n, mine, alloc, out);
    if (r == VK_SUCCESS && enabled)
        for (uint32_t i = 0; i < n; i++) {
            dump_cache(device, &mine[i], pipelines);
            report(out[i], ci[i].stage.pName ? ci[i].stage.pName : "?");
        }
    free(mine);
    free(rob);
    return r;
}

static VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL layer_GetDeviceProcAddr(VkDevice device, const char *name)
{
    if (!strcmp(name, "vkGetDeviceProcAddr")) return (PFN_vkVoidFunction)layer_GetDeviceProcAddr;
    if (!strcmp(name, "vkCreateComputePipelines")) return (PFN_vkVoidFunction)layer_CreateComputePipelines;
    return next_gdpa ? next_gdpa(device, name) : NULL;
}

static VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL layer_GetInstanceProcAddr(VkInstance instance, const char *name)
{
    if (instance) last_instance = instance;
    if (!strcmp(name, "vkGetInstanceProcAddr")) return (PFN_vkVoidFunction)layer_GetInstanceProcAddr;
    if (!strcmp(name, "vkCreateInstance")) return (PFN_vkVoidFunction)layer_CreateInstance;
    if (!strcmp(name, "vkCreateDevice")) return (PFN_vkVoidFunction)layer_CreateDevice;
    if (!strcmp(name, "vkGetDeviceProcAddr")) return (PFN_vkVoidFunction)layer_GetDeviceProcAddr;
    if (!strcmp(name, "vkCreateComputePipelines")) return (PFN_vkVoidFunction)layer_CreateComputePipelines;
    return next_gipa ? next_gipa(instance, name) : NULL;
}

VKAPI_ATTR VkResult VKAPI_CALL vkNegotiateLoaderLayerInterfaceVersion(VkNegotiateLayerInterface *v)
{
    if (v->loaderLayerInterfaceVersion < 2) return VK_ERROR_INITIALIZATION_FAILED;
    v->loaderLayerInterfaceVersion = 2;
    v->pfnGetInstanceProcAddr = layer_GetInstanceProcAddr;
    v->pfnGetDeviceProcAddr = layer_GetDeviceProcAddr;
    v->pfnGetPhysicalDeviceProcAddr = NULL;
    return VK_SUCCESS;
}
