"""The Your trace tab: `tab` (a trace picked or uploaded, its steps drawn, the what-ifs and the kernels),
`diff_view` (two traces compared by kernel family)."""
