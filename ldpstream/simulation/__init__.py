"""Offline simulation and tuning: trials of every mechanism and decoder, losses, parameter recommendation."""
