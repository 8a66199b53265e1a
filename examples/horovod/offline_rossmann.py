"""Kaggle's Rossmann Store Sales CSVs without a download: small, synthetic and seeded, for Horovod's
``keras_spark_rossmann_estimator.py`` on machines with no internet (or no Kaggle account).

    python examples/horovod/offline_rossmann.py DATA_DIR [--stores 6] [--seed 0]

writes the seven files the example reads from ``--data-dir``, with their columns, formats and join keys:

* ``train.csv``: ``Store,DayOfWeek,Date,Sales,Customers,Open,Promo,StateHoliday,SchoolHoliday``, the newest day
  first, every store each day; a store is closed (``Open`` 0, no sales) on Sundays and on state holidays (``a``);
* ``test.csv``: ``Id,Store,DayOfWeek,Date,Open,Promo,StateHoliday,SchoolHoliday``, the days after the training
  ones (Kaggle's: 2015-08-01 on), Ids from 1;
* ``store.csv``: ``Store,StoreType,Assortment,CompetitionDistance,CompetitionOpenSinceMonth,
  CompetitionOpenSinceYear,Promo2,Promo2SinceWeek,Promo2SinceYear,PromoInterval``, empty where Kaggle's are
  (no competition date, no Promo2), ``PromoInterval`` as ``"Jan,Apr,Jul,Oct"``;
* ``store_states.csv``: ``Store,State``, a German state's abbreviation (``"HB,NI"`` for Lower Saxony with Bremen);
* ``state_names.csv``: ``StateName,State``;
* ``googletrend.csv``: ``file,week,trend``, ``file`` as ``Rossmann_DE_<state>`` (``Rossmann_DE_NI`` for
  ``HB,NI``) or ``Rossmann_DE`` for all Germany, ``week`` as ``"2015-07-26 - 2015-08-01"`` (Sunday to Saturday),
  one row a week for each;
* ``weather.csv``: ``file,Date,...`` with Kaggle's weather columns, ``file`` a state's ``StateName``, one row a
  day for each state.

The days are the example's: training days in 2014 and 2015, test days in August 2015, and the same days of
2014 among the training days (the example validates on them); none near a new year, where a week's number and its
year disagree. The sales follow the store, the day of the week and the promotion, with noise; the numbers mean
nothing else. Six stores make 474 training rows (407 with sales, 101 of them the validation days) and 126
test rows.
"""
import argparse
import csv
import datetime
import math
import os
import random

# Rossmann's states: (abbreviation as store_states.csv has it, StateName as state_names.csv and weather.csv have it,
# the state's name in googletrend.csv's file).
STATES = [("BW", "BadenWuerttemberg", "BW"), ("BY", "Bayern", "BY"), ("BE", "Berlin", "BE"),
          ("HB,NI", "Niedersachsen", "NI"), ("HE", "Hessen", "HE"), ("HH", "Hamburg", "HH"),
          ("NW", "NordrheinWestfalen", "NW"), ("RP", "RheinlandPfalz", "RP"), ("SH", "SchleswigHolstein", "SH"),
          ("SN", "Sachsen", "SN"), ("ST", "SachsenAnhalt", "ST"), ("TH", "Thueringen", "TH")]
# The stores' states, in turn: one with the "HB,NI" that the example maps googletrend's NI to.
STORE_STATES = ["NW", "BY", "HB,NI", "HE", "BE", "SN"]
# Training days: summer 2014 (with the test days' dates of 2014, the example's validation rows) and summer 2015.
TRAIN_DAYS = [(datetime.date(2014, 7, 15), datetime.date(2014, 8, 31)),
              (datetime.date(2015, 7, 1), datetime.date(2015, 7, 31))]
TEST_DAYS = (datetime.date(2015, 8, 1), datetime.date(2015, 8, 21))
# State holidays ("a": public holiday) among those days: (date, the states that have it).
STATE_HOLIDAYS = {datetime.date(2014, 8, 15): {"BY"}, datetime.date(2015, 8, 15): {"BY"}}
PROMO_INTERVALS = ["Jan,Apr,Jul,Oct", "Feb,May,Aug,Nov", "Mar,Jun,Sept,Dec"]
WEATHER_COLUMNS = ["Max_TemperatureC", "Mean_TemperatureC", "Min_TemperatureC", "Dew_PointC", "MeanDew_PointC",
                   "Min_DewpointC", "Max_Humidity", "Mean_Humidity", "Min_Humidity", "Max_Sea_Level_PressurehPa",
                   "Mean_Sea_Level_PressurehPa", "Min_Sea_Level_PressurehPa", "Max_VisibilityKm",
                   "Mean_VisibilityKm", "Min_VisibilitykM", "Max_Wind_SpeedKm_h", "Mean_Wind_SpeedKm_h",
                   "Max_Gust_SpeedKm_h", "Precipitationmm", "CloudCover", "Events", "WindDirDegrees"]
EVENTS = ["", "", "Rain", "Fog", "Rain-Thunderstorm", "Fog-Rain"]


def days(first, last):
    return [first + datetime.timedelta(n) for n in range((last - first).days + 1)]


def _write(path, header, rows):
    with open(path, "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")  # quotes a field with a comma: "HB,NI", "Jan,Apr,Jul,Oct"
        writer.writerow(header)
        writer.writerows(rows)
    return len(rows)


def _store_row(store, rng):
    competition = rng.random() < 0.7
    promo2 = store % 2 == 0
    return [store, "abcd"[store % 4], "abc"[store % 3], rng.choice([290, 570, 1270, 2030, 5150, 14130]),
            rng.randint(1, 12) if competition else "", rng.randint(2006, 2014) if competition else "",
            int(promo2), rng.randint(1, 45) if promo2 else "", rng.choice([2011, 2012, 2013]) if promo2 else "",
            PROMO_INTERVALS[store % 3] if promo2 else ""]


def _day(store, state, day, rng):
    """(DayOfWeek, Open, Promo, StateHoliday, SchoolHoliday, Sales, Customers) of a store on a day."""
    weekday = day.isoweekday()
    holiday = "a" if state in STATE_HOLIDAYS.get(day, ()) else "0"
    is_open = weekday != 7 and holiday == "0"
    promo = int(is_open and weekday <= 5 and day.isocalendar()[1] % 2 == store % 2)
    school = int(day.month == 8 or (day.month == 7 and day.day >= 20 + STORE_STATES.index(state)))
    sales = 0
    if is_open:
        sales = (3000 + 400 * store) * (1.35 if promo else 1.0) * (1.25 if weekday == 1 else 1.0)
        sales = int(sales * rng.uniform(0.85, 1.15))
    customers = int(sales / rng.uniform(8.0, 10.0)) if sales else 0
    return weekday, int(is_open), promo, holiday, school, sales, customers


def write_csvs(data_dir, stores=6, seed=0):
    """Writes the seven CSVs into ``data_dir`` (created); returns each file's number of rows, by name."""
    rng = random.Random(seed)
    os.makedirs(data_dir, exist_ok=True)
    states = {store: STORE_STATES[(store - 1) % len(STORE_STATES)] for store in range(1, stores + 1)}
    written = {}
    train_days = sorted((d for first, last in TRAIN_DAYS for d in days(first, last)), reverse=True)
    test_days = sorted(days(*TEST_DAYS), reverse=True)

    train = []
    for day in train_days:
        for store in range(1, stores + 1):
            weekday, is_open, promo, holiday, school, sales, customers = _day(store, states[store], day, rng)
            train.append([store, weekday, day.isoformat(), sales, customers, is_open, promo, holiday, school])
    written["train.csv"] = _write(os.path.join(data_dir, "train.csv"), [
        "Store", "DayOfWeek", "Date", "Sales", "Customers", "Open", "Promo", "StateHoliday", "SchoolHoliday"], train)

    test = []
    for day in test_days:
        for store in range(1, stores + 1):
            weekday, is_open, promo, holiday, school, _, _ = _day(store, states[store], day, rng)
            test.append([len(test) + 1, store, weekday, day.isoformat(), is_open, promo, holiday, school])
    written["test.csv"] = _write(os.path.join(data_dir, "test.csv"), [
        "Id", "Store", "DayOfWeek", "Date", "Open", "Promo", "StateHoliday", "SchoolHoliday"], test)

    written["store.csv"] = _write(os.path.join(data_dir, "store.csv"), [
        "Store", "StoreType", "Assortment", "CompetitionDistance", "CompetitionOpenSinceMonth",
        "CompetitionOpenSinceYear", "Promo2", "Promo2SinceWeek", "Promo2SinceYear", "PromoInterval"],
        [_store_row(store, rng) for store in range(1, stores + 1)])
    written["store_states.csv"] = _write(os.path.join(data_dir, "store_states.csv"), ["Store", "State"],
                                         [[store, states[store]] for store in range(1, stores + 1)])
    written["state_names.csv"] = _write(os.path.join(data_dir, "state_names.csv"), ["StateName", "State"],
                                        [[name, state] for state, name, _ in STATES])

    # Google Trends' weeks, Sunday to Saturday, for each state and all Germany. The example joins a day to the week
    # whose Sunday has the day's (ISO) week number, the Sunday that ends the day's week: the weeks from the Sunday
    # before the first day to the Sunday on or after the last.
    first = min(train_days + test_days)
    last = max(train_days + test_days)
    sunday = first - datetime.timedelta(first.isoweekday() % 7)
    trends = []
    for file in ["Rossmann_DE"] + [f"Rossmann_DE_{trend}" for _, _, trend in STATES]:
        week = sunday
        while week - datetime.timedelta(7) < last:
            trends.append([file, f"{week.isoformat()} - {(week + datetime.timedelta(6)).isoformat()}",
                           rng.randint(40, 100)])
            week += datetime.timedelta(7)
    written["googletrend.csv"] = _write(os.path.join(data_dir, "googletrend.csv"), ["file", "week", "trend"], trends)

    weather = []
    for _, name, _ in STATES:
        for day in sorted(set(train_days + test_days)):
            mean = round(17 + 6 * math.sin((day.timetuple().tm_yday - 110) / 58.0) + rng.uniform(-4, 4))
            humidity = rng.randint(45, 90)
            wind = rng.randint(5, 30)
            cloud = rng.choice(["", 1, 3, 5, 6, 7, 8])
            weather.append([name, day.isoformat(), mean + 5, mean, mean - 6, mean - 8, mean - 10, mean - 12,
                            min(100, humidity + 15), humidity, max(20, humidity - 25), 1022, 1017, 1012, 31, 15, 8,
                            wind + 10, wind, rng.choice(["", wind + 20]), round(rng.uniform(0, 6), 2), cloud,
                            rng.choice(EVENTS), rng.randint(1, 360)])
    written["weather.csv"] = _write(os.path.join(data_dir, "weather.csv"), ["file", "Date"] + WEATHER_COLUMNS, weather)
    return written


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data_dir", help="the folder to write the CSVs to (the example's --data-dir)")
    parser.add_argument("--stores", type=int, default=6, help="how many stores")
    parser.add_argument("--seed", type=int, default=0, help="the random numbers' seed")
    args = parser.parse_args()
    for name, rows in write_csvs(args.data_dir, args.stores, args.seed).items():
        print(f"{os.path.join(args.data_dir, name)}: {rows} rows")
