from machines.testing.profiles import load_profile

load_profile()  # HYPOTHESIS_PROFILE (dev, ci or thorough), else dev
