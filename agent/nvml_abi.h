// The part of NVML's C ABI the agent uses, declared here because no NVML header is installed
// where trainscope builds: the types, constants and function signatures of NVIDIA's NVML API
// reference (docs.nvidia.com/deploy/nvml-api), with the values NVML defines. Nothing here is
// linked: agent/gpu_health.cpp looks every function up with dlsym. Pure declarations.
#pragma once

#include <cstdint>

// NOLINTBEGIN(readability-identifier-naming): NVML's own names, so a reader can look them up.
extern "C" {

using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
using nvmlEventSet_t = struct nvmlEventSet_st*;

// nvmlReturn_t values.
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_UNINITIALIZED = 1;
constexpr nvmlReturn_t NVML_ERROR_INVALID_ARGUMENT = 2;
constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
constexpr nvmlReturn_t NVML_ERROR_NO_PERMISSION = 4;
constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
constexpr nvmlReturn_t NVML_ERROR_DRIVER_NOT_LOADED = 9;
constexpr nvmlReturn_t NVML_ERROR_TIMEOUT = 10;
constexpr nvmlReturn_t NVML_ERROR_FUNCTION_NOT_FOUND = 13;
constexpr nvmlReturn_t NVML_ERROR_GPU_IS_LOST = 15;
constexpr nvmlReturn_t NVML_ERROR_RESET_REQUIRED = 16;
constexpr nvmlReturn_t NVML_ERROR_NO_DATA = 21;
constexpr nvmlReturn_t NVML_ERROR_UNKNOWN = 999;

struct nvmlUtilization_t {
  unsigned int gpu;     // percent of the last sample period a kernel ran
  unsigned int memory;  // percent of it device memory was read or written
};

struct nvmlMemory_t {
  unsigned long long total;  // bytes
  unsigned long long free;
  unsigned long long used;
};

struct nvmlViolationTime_t {
  unsigned long long referenceTime;  // us, when the counter was read
  unsigned long long violationTime;  // ns, cumulative time the policy held the clocks down
};

struct nvmlEventData_t {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;  // the Xid for nvmlEventTypeXidCriticalError
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

// nvmlTemperatureSensors_t
constexpr unsigned int NVML_TEMPERATURE_GPU = 0;
// nvmlClockType_t
constexpr unsigned int NVML_CLOCK_GRAPHICS = 0;
constexpr unsigned int NVML_CLOCK_SM = 1;
constexpr unsigned int NVML_CLOCK_MEM = 2;
// nvmlPerfPolicyType_t
constexpr unsigned int NVML_PERF_POLICY_POWER = 0;
constexpr unsigned int NVML_PERF_POLICY_THERMAL = 1;
// nvmlMemoryErrorType_t
constexpr unsigned int NVML_MEMORY_ERROR_TYPE_CORRECTED = 0;
constexpr unsigned int NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1;
// nvmlEccCounterType_t
constexpr unsigned int NVML_VOLATILE_ECC = 0;
// nvmlEnableState_t
constexpr unsigned int NVML_FEATURE_ENABLED = 1;
// nvmlNvLinkErrorCounter_t
constexpr unsigned int NVML_NVLINK_ERROR_DL_REPLAY = 0;
constexpr unsigned int NVML_NVLINK_ERROR_DL_RECOVERY = 1;
constexpr unsigned int NVML_NVLINK_ERROR_DL_CRC_FLIT = 2;
constexpr unsigned int NVML_NVLINK_ERROR_DL_CRC_DATA = 3;
constexpr unsigned int NVML_NVLINK_MAX_LINKS = 18;

constexpr unsigned int NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96;
constexpr unsigned int NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;

// Event types (nvmlDeviceRegisterEvents).
constexpr unsigned long long nvmlEventTypeSingleBitEccError = 0x1ULL;
constexpr unsigned long long nvmlEventTypeDoubleBitEccError = 0x2ULL;
constexpr unsigned long long nvmlEventTypeXidCriticalError = 0x8ULL;

// Clock-event (throttle) reasons (nvmlDeviceGetCurrentClocksEventReasons).
constexpr unsigned long long nvmlClocksEventReasonGpuIdle = 0x1ULL;
constexpr unsigned long long nvmlClocksEventReasonApplicationsClocksSetting = 0x2ULL;
constexpr unsigned long long nvmlClocksEventReasonSwPowerCap = 0x4ULL;
constexpr unsigned long long nvmlClocksThrottleReasonHwSlowdown = 0x8ULL;
constexpr unsigned long long nvmlClocksEventReasonSyncBoost = 0x10ULL;
constexpr unsigned long long nvmlClocksEventReasonSwThermalSlowdown = 0x20ULL;
constexpr unsigned long long nvmlClocksThrottleReasonHwThermalSlowdown = 0x40ULL;
constexpr unsigned long long nvmlClocksThrottleReasonHwPowerBrakeSlowdown = 0x80ULL;
constexpr unsigned long long nvmlClocksEventReasonDisplayClockSetting = 0x100ULL;

using nvmlInit_v2_fn = nvmlReturn_t (*)();
using nvmlShutdown_fn = nvmlReturn_t (*)();
using nvmlErrorString_fn = const char* (*)(nvmlReturn_t);
using nvmlDeviceGetCount_v2_fn = nvmlReturn_t (*)(unsigned int*);
using nvmlDeviceGetHandleByIndex_v2_fn = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);
using nvmlDeviceGetUUID_fn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);
using nvmlDeviceGetName_fn = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned int);
using nvmlDeviceGetUtilizationRates_fn = nvmlReturn_t (*)(nvmlDevice_t, nvmlUtilization_t*);
using nvmlDeviceGetMemoryInfo_fn = nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*);
using nvmlDeviceGetPowerUsage_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*);  // mW
using nvmlDeviceGetTotalEnergyConsumption_fn = nvmlReturn_t (*)(nvmlDevice_t,
                                                                unsigned long long*);  // mJ
using nvmlDeviceGetTemperature_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int, unsigned int*);
using nvmlDeviceGetClockInfo_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int,
                                                   unsigned int*);  // MHz
using nvmlDeviceGetCurrentClocksEventReasons_fn = nvmlReturn_t (*)(nvmlDevice_t,
                                                                   unsigned long long*);
using nvmlDeviceGetViolationStatus_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int,
                                                         nvmlViolationTime_t*);
using nvmlDeviceGetTotalEccErrors_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int, unsigned int,
                                                        unsigned long long*);
using nvmlDeviceGetRemappedRows_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, unsigned int*,
                                                      unsigned int*, unsigned int*);
using nvmlDeviceGetNvLinkState_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int, unsigned int*);
using nvmlDeviceGetNvLinkErrorCounter_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int,
                                                            unsigned int, unsigned long long*);
using nvmlEventSetCreate_fn = nvmlReturn_t (*)(nvmlEventSet_t*);
using nvmlDeviceGetSupportedEventTypes_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned long long*);
using nvmlDeviceRegisterEvents_fn = nvmlReturn_t (*)(nvmlDevice_t, unsigned long long,
                                                     nvmlEventSet_t);
using nvmlEventSetWait_v2_fn = nvmlReturn_t (*)(nvmlEventSet_t, nvmlEventData_t*,
                                                unsigned int);  // timeout in ms
using nvmlEventSetFree_fn = nvmlReturn_t (*)(nvmlEventSet_t);

}  // extern "C"
// NOLINTEND(readability-identifier-naming)
