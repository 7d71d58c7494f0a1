#!/usr/bin/env python3
"""Writes assets/corpora/weather.csv: the gallery's table (issue 36).

A made-up daily weather log of five cities from a fixed seed: a header,
then one row per city and day. Its structure is what a model can learn:
dates that count up, a city's own climate through the seasons, Fahrenheit
that follows from Celsius, rain only on rainy days, snow only in the cold.
The numbers are not real measurements. Run from the repository's root:
    python3 scripts/make-weather-csv.py
"""
import datetime
import math
import random

CITIES = [
    # name, mean high °C, seasonal swing, day-to-day spread, rain chance
    ("Oslo", 10, 11, 3, 0.35),
    ("Madrid", 21, 10, 3, 0.15),
    ("Lagos", 31, 2, 2, 0.40),
    ("Lima", 22, 4, 1, 0.05),
    ("Sapporo", 13, 14, 3, 0.30),
]


def main():
    rng = random.Random(36)
    rows = ["date,city,high_c,high_f,low_c,low_f,rain_mm,sky"]
    day = datetime.date(2021, 1, 1)
    for _ in range(1200):
        season = math.cos(2 * math.pi * (day.timetuple().tm_yday - 200) / 365.25)
        for name, mean, swing, spread, rain_chance in CITIES:
            south = name in ("Lima",)
            high = round(mean + (-1 if south else 1) * swing * season + rng.gauss(0, spread))
            low = high - rng.randint(4, 10)
            rainy = rng.random() < rain_chance
            if rainy:
                sky = "snow" if high <= 1 else "rain"
                rain = round(rng.expovariate(1 / 6), 1)
            else:
                sky = rng.choice(["sunny", "sunny", "cloudy", "fog" if low < 8 else "cloudy"])
                rain = 0.0
            f = lambda c: round(c * 9 / 5 + 32)
            rows.append(f"{day.isoformat()},{name},{high},{f(high)},{low},{f(low)},{rain},{sky}")
        day += datetime.timedelta(days=1)
    with open("assets/corpora/weather.csv", "w") as out:
        out.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
