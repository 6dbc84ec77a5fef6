"""Known timing-model parameters that the synthetic probe runs in the tests are generated with.

Deliberately unlike the recorded runs' fitted values, so a fit that returned its starting point
or a recorded run's figures would fail the recovery tests. The issue rates (instruction-bound
products on CUDA cores) are 1e5 GB/s, no bound: the test of that term sets its own.
"""

KNOWN_PARAMS = dict(
    gemv_latency_us=3.1, gemv_GBps=2500.0, gemv_TFLOPs=90.0, gemv_issue_GBps=1e5,
    tile_gemm_latency_us=4.5, tile_gemm_GBps=2100.0, tile_gemm_TFLOPs=250.0,
    tile_gemm_wide_latency_us=6.5, tile_gemm_wide_GBps=1800.0, tile_gemm_wide_TFLOPs=350.0,
    unpiped_gemm_latency_us=7.5, unpiped_gemm_GBps=1200.0, unpiped_gemm_TFLOPs=200.0,
    unpiped_gemm_wide_latency_us=9.5, unpiped_gemm_wide_GBps=700.0, unpiped_gemm_wide_TFLOPs=150.0,
    attention_latency_us=5.5, attention_GBps=2900.0, attention_TFLOPs=150.0,
    triton_op_latency_us=2.3, triton_op_GBps=1400.0,
    split_merge_latency_us=1.7, split_merge_GBps=900.0,
    cublas_gemv_latency_us=3.4, cublas_gemv_GBps=1600.0, cublas_gemv_TFLOPs=70.0,
    cublas_latency_us=4.2, cublas_GBps=2200.0, cublas_TFLOPs=450.0,
    aten_latency_us=1.3, aten_GBps=600.0,
    persistent_latency_us=140.0, persistent_GBps=3300.0, persistent_TFLOPs=60.0, persistent_issue_GBps=1e5,
    pdl_hidden_share=0.35,
    triton_launch_us=18.0,
    start_launch_share=6.0, aten_launch_share=0.4, cublas_launch_share=0.7, attention_launch_share=1.5,
    merge_launch_share=0.6, op_launch_share=0.9,
    replay_us=25.0, replay_per_node_us=0.05, replay_per_row_us=0.6,
    node_gap_us=0.8, input_copy_share=0.3,
)  # fmt: skip
