"""bench.trace: kernel classification, step names, step attribution and the verdict on synthetic traces
(real traces and capture: tests/bench/trace/test_capture.py)."""

from __future__ import annotations

import json

import pytest
from helpers_trace import run_trace

from bench.trace.analyse import analyse_events
from bench.trace.classify import classify_kernel
from bench.trace.step_names import step_kind

# ----- classification ---------------------------------------------------------------------------

COMM = [
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "nccl", "all_reduce"),
    ("ncclKernel_AllReduce_RING_LL_Sum_half(ncclWorkElem)", "nccl", "all_reduce"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "nccl", "all_gather"),
    ("ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "nccl", "broadcast"),
    ("_all_gather_kernel_inner", "symm-mem", "all_gather"),  # SGLang's Triton multimem logits gather
    ("void c10d::symmetric_memory::multimem_all_gather_kernel<16>(...)", "symm-mem", "all_gather"),
    ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", "nccl", "reduce_scatter"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "nccl", "send_recv"),
    ("ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)", "nccl", "collective"),
    (
        "void sglang::cross_device_reduce_1stage<__nv_bfloat16, 8>(sglang::RankData*, sglang::RankSignals, sglang::Signal*, __nv_bfloat16*, int, int)",
        "custom-ar",
        "all_reduce",
    ),
    (
        "void vllm::cross_device_reduce_2stage<__nv_bfloat16, 4>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, __nv_bfloat16*, int, int)",
        "custom-ar",
        "all_reduce",
    ),
    (
        "void device::all_reduce_1shot_push_kernel<__nv_bfloat16, 8>(AllReducePushParams<8>)",
        "custom-ar",
        "all_reduce",
    ),
    (
        "void device::all_reduce_2shot_pull_kernel<__nv_bfloat16, 8>(AllReducePullParams<8>)",
        "custom-ar",
        "all_reduce",
    ),
    (
        "void tensorrt_llm::kernels::oneShotAllReduceKernel<__nv_bfloat16, 8>(AllReduceParams)",
        "custom-ar",
        "all_reduce",
    ),
    (
        "void c10d::symmetric_memory::one_shot_all_reduce_kernel<c10::BFloat16, 16, 8>(c10::BFloat16**, c10::BFloat16*, c10::BFloat16*, unsigned long, unsigned long, unsigned int**, unsigned long, unsigned long)",
        "symm-mem",
        "all_reduce",
    ),
    (
        "void c10d::symmetric_memory::multimem_all_reduce_kernel<c10::BFloat16, true, 16>(...)",
        "symm-mem",
        "all_reduce",
    ),
    (
        "void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<(AllReduceFusionPattern)1, __nv_bfloat16, 8, true, true>(AllReduceFusionParams<__nv_bfloat16>)",
        "fused-ar",
        "all_reduce",
    ),
    (
        "void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_twoshot_sync<__nv_bfloat16, 8, true>(AllReduceFusionParams<__nv_bfloat16>, std::array<int, 8>, std::array<int, 8>)",
        "fused-ar",
        "all_reduce",
    ),
    (
        "void allreduceAllPairs<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, mscclpp::DeviceHandle<mscclpp::MemoryChannel>*, unsigned long, int, int, int, unsigned long, unsigned int)",
        "mscclpp",
        "all_reduce",
    ),
    ("void allreducePacket<__nv_bfloat16>(...)", "mscclpp", "all_reduce"),
    (
        "void deep_ep::internode_ll::dispatch<true, 3, 10, 7168>(void*, float*, int*, long*, int*, void*, int*, void*, void const*, long const*, int*, int*, int, int, int, int, int, int, int, bool)",
        "deepep",
        "dispatch",
    ),
    ("void deep_ep::intranode::combine<__nv_bfloat16, 8, 768>(...)", "deepep", "combine"),
    (
        "void flashinfer::comm::pcie_ipc_all_reduce_kernel<__nv_bfloat16, 8>(PcieIpcParams)",
        "pcie-ipc",
        "all_reduce",
    ),
]

COMPUTE = [
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT",
    "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::bfloat16_t>, false>(Flash_fwd_params)",
    "void flashinfer::BatchPrefillWithPagedKVCacheKernel<...>",
    "fused_moe_kernel",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>>, unsigned int, float, 4>>(...)",
    "void flashinfer::norm::RMSNormKernel<8, __nv_bfloat16>(...)",
]


@pytest.mark.parametrize(("name", "family", "op"), COMM)
def test_communication_kernels(name, family, op):
    cls = classify_kernel(name)
    assert (cls.category, cls.family, cls.op) == ("comm", family, op)


@pytest.mark.parametrize("name", COMPUTE)
def test_compute_kernels(name):
    cls = classify_kernel(name)
    assert cls.category == "compute" and not cls.is_allreduce


def test_step_marker_names():
    assert step_kind("step[VERIFY bs=1]") == (0, "verify")
    assert step_kind("step[DECODE bs=4]") == (0, "decode")
    assert step_kind("step[DRAFT_EXTEND_V2 bs=1]") == (0, "draft")
    assert step_kind("step[EXTEND bs=1 toks=512]") == (0, "prefill")
    assert step_kind("step[IDLE bs=0]") == (0, "")
    assert step_kind("verify") == (1, "verify")
    assert step_kind("forward_decode") == (2, "decode")
    assert step_kind("ProfilerStep#3") == (2, "forward")
    assert step_kind("nccl:all_reduce") is None and step_kind("aten::mm") is None


# ----- synthetic GPU trace: attribution through correlation ids ---------------------------------


def _synthetic(steps: list[tuple[str, list[tuple[str, float]]]], launch_gap_us: float = 3.0) -> list[dict]:
    """CPU step spans on (pid 1, tid 1); each kernel launched inside its step, run on (pid 0, stream 7)."""
    events: list[dict] = []
    t_cpu, t_gpu, corr = 1000.0, 1000.0, 0
    for name, kernels in steps:
        start = t_cpu
        for kname, dur in kernels:
            corr += 1
            events.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 1,
                    "tid": 1,
                    "ts": t_cpu,
                    "dur": 2.0,
                    "args": {"correlation": corr},
                }
            )
            t_gpu = max(t_gpu, t_cpu + 5.0)
            events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": kname,
                    "pid": 0,
                    "tid": 7,
                    "ts": t_gpu,
                    "dur": dur,
                    "args": {"correlation": corr, "device": 0, "stream": 7},
                }
            )
            t_gpu += dur + launch_gap_us
            t_cpu += 4.0
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": name,
                "pid": 1,
                "tid": 1,
                "ts": start,
                "dur": t_cpu - start,
            }
        )
        t_cpu = max(t_cpu, t_gpu) + 50.0
    return events


NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64"


def test_synthetic_verify_steps_give_the_verdict():
    layers = 6
    verify = [(GEMM, 40.0), (NCCL, 200.0)] * layers
    decode = [(GEMM, 30.0), (NCCL, 150.0)] * layers
    events = _synthetic([("step[VERIFY bs=1]", verify)] * 3 + [("step[DECODE bs=1]", decode)] * 2)
    result = analyse_events(events).to_json()  # as `bench trace --json` prints it
    v = result["steps"]["verify"]
    window = layers * (40 + 200) + (2 * layers - 1) * 3.0
    assert v["steps"] == 3 and v["allreduces_per_step"] == layers
    assert v["mean_gpu_window_ms"] == pytest.approx(window / 1000, abs=1e-3)
    assert v["comm_share"] == pytest.approx(layers * 200 / window, abs=1e-3)
    assert result["steps"]["decode"]["allreduces_per_step"] == layers
    assert result["allreduce"]["count"] == 5 * layers
    assert result["allreduce"]["mean_us"] == pytest.approx((3 * 200 + 2 * 150) / 5)
    share = round(100 * layers * 200 / window)
    mean = (3 * 200 + 2 * 150) / 5
    assert (
        result["verdict"]
        == f"communication {share}% of verify; {layers} all-reduces/step; mean {mean:.0f} µs"
    )
    (device,) = result["devices"]
    assert device["idle_gaps"] >= 4  # the 50 µs pauses between steps


@pytest.mark.parametrize("linked", [True, False])
def test_kernels_without_correlation_fall_back_to_gpu_annotations(linked):
    events = _synthetic([("step[VERIFY bs=1]", [(GEMM, 10.0), (NCCL, 30.0)])])
    for e in events:
        e.get("args", {}).pop("correlation", None)
    kernels = [e for e in events if e["cat"] == "kernel"]
    start, end = kernels[0]["ts"], kernels[-1]["ts"] + kernels[-1]["dur"]
    gpu_range = {
        "ph": "X",
        "cat": "gpu_user_annotation",
        "name": "step[VERIFY bs=1]",
        "pid": 0,
        "tid": 7,
        "ts": start,
        "dur": end - start,
        "args": {},
    }
    if linked:  # the profiler links the GPU-side range to its CPU range by "External id"
        gpu_range["args"]["External id"] = 42
        next(e for e in events if e["cat"] == "user_annotation")["args"] = {"External id": 42}
    events.append(gpu_range)
    result = analyse_events(events).to_json()  # as `bench trace --json` prints it
    assert result["steps"]["verify"]["steps"] == 1  # never counted twice
    assert result["steps"]["verify"]["allreduces_per_step"] == 1
    assert result["steps"]["verify"]["comm_share"] == pytest.approx(30 / (end - start), abs=1e-3)


BCAST = "ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
GATHER = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def test_broadcasts_and_allgathers_are_counted_beside_allreduces():
    layers = 4
    forward = [(NCCL, 20.0)] + [(GEMM, 40.0), (NCCL, 20.0), (GEMM, 40.0), (NCCL, 20.0)] * layers + [(GEMM, 10.0),
                                                                                                   (GATHER, 30.0)]
    verify = forward + [(BCAST, 50.0)] * 3  # temperature > 0: the sampling broadcasts after the forward
    events = _synthetic([("step[VERIFY bs=1]", verify)] * 2 + [("step[DECODE bs=1]", forward)])
    result = analyse_events(events).to_json()  # as `bench trace --json` prints it
    v, d = result["steps"]["verify"], result["steps"]["decode"]
    assert (v["allreduces_per_step"], v["broadcasts_per_step"], v["allgathers_per_step"]) == (1 + 2 * layers, 3, 1)
    assert (d["allreduces_per_step"], d["broadcasts_per_step"], d["allgathers_per_step"]) == (1 + 2 * layers, 0, 1)
    assert result["broadcast"]["count"] == 6 and result["broadcast"]["mean_us"] == pytest.approx(50.0)
    assert result["allgather"]["count"] == 3 and result["allreduce"]["count"] == 3 * (1 + 2 * layers)
    assert set(result["comm_by_op"]) == {"all_reduce", "all_gather", "broadcast"}
    assert "; 9 all-reduces/step; 3 broadcasts/step; 1 all-gathers/step; mean 20 µs" in result["verdict"]


@pytest.mark.stack
def test_broadcast_report_and_json(tmp_path):
    events = _synthetic([("step[VERIFY bs=1]", [(GEMM, 40.0), (NCCL, 20.0), (GATHER, 30.0)] + [(BCAST, 50.0)] * 3)])
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    proc = run_trace(str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["steps"]["verify"]["broadcasts_per_step"] == 3 and data["allgather"]["count"] == 1
    proc = run_trace(str(path))
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert "communication by collective" in out and "│ broadcast │ 3 │ 50.0 │" in out
    assert "│ verify │ 1 │" in out and "│ 1.0 │ 3.0 │ 1.0 │" in out  # AR, BC, AG per step


def test_no_steps_reports_share_of_busy_time():
    events = [e for e in _synthetic([("x", [(GEMM, 100.0), (NCCL, 300.0)])]) if e["cat"] != "user_annotation"]
    result = analyse_events(events).to_json()  # as `bench trace --json` prints it
    assert result["steps"] == {}
    assert result["verdict"].startswith("communication 75% of GPU busy time (no step markers); 1 all-reduces")

