"""The Simulator tab: `tab` (the controls, the readouts, the lanes), `presets` (the static presets and the one
calibrated to the recorded run), `sections` (the batch sweep and the fusion view below the lanes)."""
