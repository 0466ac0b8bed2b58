"""Never finishes importing."""
import time

time.sleep(3600)
