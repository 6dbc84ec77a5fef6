"""The Calibration tab: `tab` (a probe run fitted, predicted against measured), `charts`."""
