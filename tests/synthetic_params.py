"""Known simulator parameters that the synthetic probe runs in the tests are generated with.

Deliberately unlike the H200's fitted values, so a fit that returned its starting point
or the recorded run's figures would fail the recovery tests.
"""

KNOWN_PARAMS = dict(
    eager_launch_us=7.0,
    fused_launch_us=18.0,
    graph_launch_us=25.0,
    graph_launch_per_node_us=0.05,
    graph_node_gap_us=0.8,
    hbm_GBps=3600.0,
    fused_hbm_GBps=1500.0,
    matrix_TFLOPs=600.0,
    min_kernel_us=2.5,
    kv_traffic_unfused=4.0,
    kv_traffic_fused=1.2,
)
