// trainscope: copied (only these two lines added) from NVIDIA/nccl plugins/profiler/example/nccl/err.h at
// 5067397c2676d5aed50042fc39e5c8ee96eb0027 (NCCL 2.30.7); the licence is LICENSE.txt beside it.

/*************************************************************************
 * SPDX-FileCopyrightText: Copyright (c) 2024-2026 NVIDIA CORPORATION & AFFILIATES. All rights reserved.
 * SPDX-License-Identifier: Apache-2.0
 *
 * See LICENSE.txt for more license information
 *************************************************************************/

#ifndef NCCL_ERR_H_
#define NCCL_ERR_H_

/* Error type for plugins */
typedef enum { ncclSuccess                 =  0,
               ncclUnhandledCudaError      =  1,
               ncclSystemError             =  2,
               ncclInternalError           =  3,
               ncclInvalidArgument         =  4,
               ncclInvalidUsage            =  5,
               ncclRemoteError             =  6 } ncclResult_t;
#endif
