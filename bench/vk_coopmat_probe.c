/* Lists what the Vulkan driver offers for matrix units (VK_KHR_cooperative_matrix, which
   Dawn maps WGSL's subgroup matrices onto) and whether it has f16 arithmetic: the facts
   behind "no tensor cores through WebGPU here" in bench/notes/attention.md ("the ceiling").
   Build and run where the Vulkan headers and loader are installed:
     cc -O1 -o vk_coopmat_probe bench/vk_coopmat_probe.c -lvulkan && ./vk_coopmat_probe
   The extension's structs are declared here so that older headers (Debian 12's 1.3.239,
   which predates it) build it too; the values are from the Vulkan registry. */
#include <stdio.h>
#include <stdlib.h>
#include <vulkan/vulkan.h>

#define STYPE_COOPMAT_FEATURES ((VkStructureType)1000506000)
#define STYPE_COOPMAT_PROPERTIES ((VkStructureType)1000506001)

typedef struct coopmat_features { VkStructureType sType; void *pNext; VkBool32 cooperativeMatrix, robustBufferAccess; } coopmat_features;
typedef struct coopmat_properties {
    VkStructureType sType;
    void *pNext;
    uint32_t m, n, k;
    int a, b, c, result;   /* VkComponentTypeKHR */
    VkBool32 saturating;
    int scope;             /* VkScopeKHR: 3 = subgroup */
} coopmat_properties;
typedef VkResult (*list_fn)(VkPhysicalDevice, uint32_t *, coopmat_properties *);

static const char *component(int t)
{
    static const char *names[] = { "f16", "f32", "f64", "s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64" };
    if (t >= 0 && t <= 10) return names[t];
    if (t == 1000141000) return "bf16";
    return "other";
}

int main(void)
{
    VkApplicationInfo app = { .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "vk_coopmat_probe",
                              .apiVersion = VK_API_VERSION_1_3 };
    VkInstanceCreateInfo ici = { .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app };
    VkInstance inst;
    if (vkCreateInstance(&ici, NULL, &inst) != VK_SUCCESS) { fprintf(stderr, "no Vulkan instance\n"); return 1; }
    VkPhysicalDevice devs[8];
    uint32_t ndev = 8;
    vkEnumeratePhysicalDevices(inst, &ndev, devs);
    list_fn list = (list_fn)vkGetInstanceProcAddr(inst, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR");
    for (uint32_t d = 0; d < ndev; d++) {
        VkPhysicalDeviceProperties props;
        vkGetPhysicalDeviceProperties(devs[d], &props);
        coopmat_features cm = { .sType = STYPE_COOPMAT_FEATURES };
        VkPhysicalDeviceVulkan12Features v12 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES, .pNext = &cm };
        VkPhysicalDeviceFeatures2 f2 = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &v12 };
        vkGetPhysicalDeviceFeatures2(devs[d], &f2);
        printf("device %s: shaderFloat16 %u vulkanMemoryModel %u deviceScope %u cooperativeMatrix %u\n", props.deviceName,
               v12.shaderFloat16, v12.vulkanMemoryModel, v12.vulkanMemoryModelDeviceScope, cm.cooperativeMatrix);
        if (!list) { printf("  (no vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR)\n"); continue; }
        uint32_t n = 0;
        list(devs[d], &n, NULL);
        coopmat_properties *p = calloc(n ? n : 1, sizeof *p);
        if (!p) return 1;
        for (uint32_t i = 0; i < n; i++) p[i].sType = STYPE_COOPMAT_PROPERTIES;
        list(devs[d], &n, p);
        for (uint32_t i = 0; i < n; i++)
            printf("  M%u N%u K%u  A %s B %s C %s result %s  saturating %u scope %d\n", p[i].m, p[i].n, p[i].k,
                   component(p[i].a), component(p[i].b), component(p[i].c), component(p[i].result), p[i].saturating, p[i].scope);
        free(p);
    }
    vkDestroyInstance(inst, NULL);
    return 0;
}
