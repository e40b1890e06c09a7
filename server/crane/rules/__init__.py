"""The offline predictor's rules: small, separately tested checks over static and runtime facts."""
